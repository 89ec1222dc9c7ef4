"""The NCCL timeout lab: fault scenarios, their launcher, Flight Recorder analysis, the doctor, and
the bandwidth half (busbw, NCCL INFO logs, `nvidia-smi topo -m`)."""

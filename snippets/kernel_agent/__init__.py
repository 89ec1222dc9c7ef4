"""A harness for agent-written kernels that cheats cannot fool, and the propose-evaluate loop around it.

spec (tasks), static (AST checks), sandbox (worker process with limits), checks (correctness),
timing (CUDA events, L2 flush, device-wide sync), harness (evaluate, fast_p), loop (proposers),
candidates (honest kernels, cheats modelled on public exploits, and faulty ones).
"""

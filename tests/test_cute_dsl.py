"""snippets/cute_dsl: what the kernel's TV layout implies, worked out by the layout algebra on any machine;
the kernel itself, where the CuTe DSL and a GPU exist, against a float64 reference."""
import pytest
import torch

from snippets.cute_dsl import add_layernorm as cd
from snippets.cute_dsl.bench import tv_accesses


def test_the_kernel_layout_gives_full_128_bit_accesses():
    assert tv_accesses() == {"tv": "(128,8):(8,1)", "bytes_per_access": 16, "sector_efficiency": 1.0}


def test_one_value_per_thread_fills_sectors_with_eight_times_the_instructions():
    one = tv_accesses(vec=1)
    assert one["bytes_per_access"] == 2 and one["sector_efficiency"] == 1.0


def test_widths_that_are_not_whole_tiles_are_refused_naming_the_tile():
    x = torch.zeros(2, cd.TILE + 8, dtype=torch.bfloat16)
    w = torch.zeros(cd.TILE + 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=str(cd.TILE)):
        cd.add_layernorm(x, x, w, w)


def test_unavailable_is_explained():
    why = cd.available()
    assert why is None or ("cutlass" in why or "GPU" in why)


@pytest.mark.gpu
def test_kernel_matches_float64_reference():
    if cd.available() is not None:
        pytest.skip(cd.available())
    from snippets.common.checks import poisoned_outputs, rel_error
    from snippets.fusion import add_layernorm as al
    from snippets.fusion.bench import ln_inputs

    for n in (1024, 5120):
        x, r, w, b = ln_inputs(77, n, torch.bfloat16, "cuda")
        with poisoned_outputs():
            h, y = cd.add_layernorm(x, r, w, b)
        y_ref, h_ref = al.add_layernorm_ref(x, r, w, b, 1e-5, dtype=torch.float64)
        assert rel_error(h, h_ref) < 8e-3 and rel_error(y, y_ref) < 8e-3

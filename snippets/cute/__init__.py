"""CuTe's layout algebra (shapes, strides, composition, complement, divides, products, swizzles) in pure Python.

No GPU and no CUTLASS install: the functions follow the definitions in CUTLASS's CuTe documentation
(media/docs/cpp/cute/01_layout.md and 02_layout_algebra.md), so a layout can be worked out by hand on a page
and checked by the tests in tests/test_cute.py.
"""

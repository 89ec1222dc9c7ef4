// The order in which output tiles are computed (shared by the device code and a host-side test).
// Grouped ("swizzled") order: walk GROUP_M tile rows column by column, so that the tiles running at the
// same time share a few B column blocks and a few A row blocks while those are still in L2.
// snippets/gemm/schedule.py:grouped_tile is the same function in Python.
#pragma once

#ifdef __CUDACC__
#define HGEMM_HD __host__ __device__ __forceinline__
#else
#define HGEMM_HD inline
#endif

namespace hgemm {

struct TileCoord {
  int m, n;  // tile row and tile column
};

HGEMM_HD TileCoord grouped_tile(int t, int tiles_m, int tiles_n, int group_m) {
  const int per_group = group_m * tiles_n;
  const int first_m = (t / per_group) * group_m;
  const int rows = (tiles_m - first_m) < group_m ? (tiles_m - first_m) : group_m;  // last group may be short
  const int in_group = t % per_group;
  return TileCoord{first_m + in_group % rows, in_group / rows};
}

}  // namespace hgemm

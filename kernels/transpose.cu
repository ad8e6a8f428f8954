/* out (cols x rows) = transpose of in (rows x cols), row-major.
 * Launch: block (32, 8), grid (ceil(cols/32), ceil(rows/32)). A 32x33 shared
 * tile keeps both the reads and the writes coalesced (the extra column avoids
 * shared-memory bank conflicts). Pure data movement: bit-exact everywhere. */
#include "em_kernel.h"

#define EM_TILE 32
#define EM_TILE_ROWS 8

EM_GLOBAL void em_transpose_f32(const float *in, float *out, em_i64 rows, em_i64 cols) {
  EM_SHARED float tile[EM_TILE][EM_TILE + 1];
  em_i64 c = (em_i64)EM_BID_X * EM_TILE + EM_TID_X;
  em_i64 r0 = (em_i64)EM_BID_Y * EM_TILE;
  for (int j = EM_TID_Y; j < EM_TILE; j += EM_TILE_ROWS) {
    em_i64 r = r0 + j;
    if (r < rows && c < cols) tile[j][EM_TID_X] = in[r * cols + c];
  }
  EM_SYNC();
  /* Output row = input column. */
  em_i64 oc = r0 + EM_TID_X;
  em_i64 or0 = (em_i64)EM_BID_X * EM_TILE;
  for (int j = EM_TID_Y; j < EM_TILE; j += EM_TILE_ROWS) {
    em_i64 orow = or0 + j;
    if (orow < cols && oc < rows) out[orow * rows + oc] = tile[EM_TID_X][j];
  }
}

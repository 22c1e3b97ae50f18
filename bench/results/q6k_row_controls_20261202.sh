#!/bin/bash
# Breaks the new Q6_K code one way at a time, runs test_matmul_invariance, restores.
cd /work/wt-kdecode
A5=src/kernels/cpu/matmul_avx512.c; PK=src/kernels/cpu/matmul_pack.c
cp $A5 /tmp/kdecode/neg/a5.orig; cp $PK /tmp/kdecode/neg/pk.orig
brk() {
  python3 - "$2" "$3" "$4" <<'PY'
import sys
p,o,n=sys.argv[1:4]; s=open(p).read(); assert s.count(o)==1, o; open(p,'w').write(s.replace(o,n,1))
PY
  cmake --build build --target test_matmul_invariance -j2 >/dev/null 2>&1 || echo "$1: BUILD FAILED"
  echo "== $1"; ./build/test_matmul_invariance 2>&1 | grep -E "differs|not invariant|PASSED|FAILED" | head -3
  cp /tmp/kdecode/neg/a5.orig $A5; cp /tmp/kdecode/neg/pk.orig $PK
}
# row kernel: blocks of a half entered in reverse order
brk avx512_q6k_row_order $A5 "            UNROLL for (int qtr = 0; qtr < 4; qtr++) {
                const int ab = 4 * n + qtr;" "            UNROLL for (int qq = 0; qq < 4; qq++) {
                const int qtr = 3 - qq, ab = 4 * n + qtr;"
# row kernel: the two 16-element halves' scales swapped
brk avx512_q6k_row_scale $A5 "                const __m512i sl = i8x16_epi32(rec + MM_Q6_SC + 16 * (2 * ab));
                const __m512i sh = i8x16_epi32(rec + MM_Q6_SC + 16 * (2 * ab + 1));
                const __m512i isum" "                const __m512i sh = i8x16_epi32(rec + MM_Q6_SC + 16 * (2 * ab));
                const __m512i sl = i8x16_epi32(rec + MM_Q6_SC + 16 * (2 * ab + 1));
                const __m512i isum"
# packing: qh words stored in the old place of the next word (layout mismatch)
brk pack_q6k_qh_slot $PK "memcpy(rec + MM_Q6_QH(wi) + 4 * c, B->qh + 4 * wi, 4);" "memcpy(rec + MM_Q6_QH(wi ^ 1) + 4 * c, B->qh + 4 * wi, 4);"
cmake --build build --target test_matmul_invariance -j2 >/dev/null 2>&1
echo "== restored"; ./build/test_matmul_invariance 2>&1 | grep -E "differs|not invariant|PASSED|FAILED" | head -3

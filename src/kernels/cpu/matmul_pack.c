/* Repacking of quantised weights into the kernels' records (layouts in
 * matmul_internal.h): one function per type, reached through the kernel table. */
#include <string.h>

#include "formats/quant.h"
#include "kernels/cpu/matmul_internal.h"

/* Copies 4-byte word `wi` of column c's quant bytes to its transposed slot. */
static void put_word(uint8_t *rec, int wi, int c, const uint8_t *src) {
    memcpy(rec + 64 * wi + 4 * c, src + 4 * wi, 4);
}

static void put_u16(uint8_t *rec, size_t off, int c, uint16_t v) {
    memcpy(rec + off + 2 * (size_t)c, &v, 2);
}

void mm_pack_q4_0(uint8_t *rec, const uint8_t *const *rows, int ncols, int64_t u) {
    for (int c = 0; c < ncols; c++) {
        const block_q4_0 *B = (const block_q4_0 *)rows[c] + u;
        for (int wi = 0; wi < 4; wi++) put_word(rec, wi, c, B->qs);
        put_u16(rec, 256, c, B->d);
    }
}

void mm_pack_q4_1(uint8_t *rec, const uint8_t *const *rows, int ncols, int64_t u) {
    for (int c = 0; c < ncols; c++) {
        const block_q4_1 *B = (const block_q4_1 *)rows[c] + u;
        for (int wi = 0; wi < 4; wi++) put_word(rec, wi, c, B->qs);
        put_u16(rec, 256, c, B->d);
        put_u16(rec, 288, c, B->m);
    }
}

void mm_pack_q8_0(uint8_t *rec, const uint8_t *const *rows, int ncols, int64_t u) {
    for (int c = 0; c < ncols; c++) {
        const block_q8_0 *B = (const block_q8_0 *)rows[c] + u;
        for (int wi = 0; wi < 8; wi++) put_word(rec, wi, c, (const uint8_t *)B->qs);
        put_u16(rec, 512, c, B->d);
    }
}

/* The 6-bit scales and mins unpacked to a byte each, so the kernels just widen them. */
void mm_pack_q4_K(uint8_t *rec, const uint8_t *const *rows, int ncols, int64_t u) {
    for (int c = 0; c < ncols; c++) {
        const block_q4_K *B = (const block_q4_K *)rows[c] + u;
        for (int wi = 0; wi < 32; wi++) put_word(rec, wi, c, B->qs);
        put_u16(rec, 2048, c, B->d);
        put_u16(rec, 2080, c, B->dmin);
        for (int j = 0; j < 8; j++)
            quant_q4_K_scale_min(B->scales, j, &rec[2112 + 16 * j + c], &rec[2240 + 16 * j + c]);
    }
}

/* Q4_K's record from Q5_K's low nibbles, scales and mins (the same 12-byte packing),
 * then the fifth bits as they are: bit j of qh[l] belongs to element 32j + l. */
void mm_pack_q5_K(uint8_t *rec, const uint8_t *const *rows, int ncols, int64_t u) {
    for (int c = 0; c < ncols; c++) {
        const block_q5_K *B = (const block_q5_K *)rows[c] + u;
        for (int wi = 0; wi < 32; wi++) put_word(rec, wi, c, B->qs);
        put_u16(rec, 2048, c, B->d);
        put_u16(rec, 2080, c, B->dmin);
        for (int j = 0; j < 8; j++)
            quant_q4_K_scale_min(B->scales, j, &rec[2112 + 16 * j + c], &rec[2240 + 16 * j + c]);
        for (int wi = 0; wi < 8; wi++) put_word(rec + 2368, wi, c, B->qh);
    }
}

void mm_pack_q6_K(uint8_t *rec, const uint8_t *const *rows, int ncols, int64_t u) {
    for (int c = 0; c < ncols; c++) {
        const block_q6_K *B = (const block_q6_K *)rows[c] + u;
        for (int wi = 0; wi < 32; wi++) memcpy(rec + MM_Q6_QL(wi) + 4 * c, B->ql + 4 * wi, 4);
        for (int wi = 0; wi < 16; wi++) memcpy(rec + MM_Q6_QH(wi) + 4 * c, B->qh + 4 * wi, 4);
        for (int s = 0; s < 16; s++) rec[MM_Q6_SC + 16 * s + c] = (uint8_t)B->scales[s];
        put_u16(rec, MM_Q6_D, c, B->d);
    }
}

/* Decoded types: the integer form of each column's block, laid out as mm_dec_layout_of
 * says: bytes q + 128 (MM_REC_DEC), nibble codes (MM_REC_NIB) or the code's two bit planes
 * (MM_REC_PL, Q3_K), the code being the first of q's value in the type's table (a value
 * listed twice, as MXFP4's zero, decodes the same either way), with one scale per 32-block
 * for ONE types and no minimums for NOMIN ones in the nibble and plane forms (the type's
 * decoder guarantees both; test_matmul_invariance checks the packed bits against the
 * integer form, test_matmul_q3k_planes the plane record against dequant_row). */
static void pack_decoded(uint8_t *rec, const uint8_t *const *rows, int ncols, int64_t u, uint32_t type,
                         int nib, int one, int nomin) {
    const quant_traits *qt = &quant_type_table[type];
    const int ue = qt->block_elems;
    const mm_dec_layout L = mm_dec_layout_of(nib, ue, one, nomin);
    uint8_t code_of[256] = {0};
    if (nib)
        for (int n = 15; n >= 0; n--) code_of[(uint8_t)(qt->codes[n] + 128)] = (uint8_t)n;
    for (int c = 0; c < ncols; c++) {
        quant_iblock B;
        qt->decode(rows[c] + (size_t)u * qt->block_bytes, &B);
        uint8_t q[256];
        for (int e = 0; e < ue; e++) q[e] = (uint8_t)(B.q[e] + 128);
        if (!nib)
            for (int wi = 0; wi < ue / 4; wi++) put_word(rec, wi, c, q);
        else if (nib == MM_FORM_PL) /* zeroed record; planes of the code n < 8, see MM_REC_PL */
            for (int e = 0; e < ue; e++) {
                const int j = e / 32, t = (e % 32) / 4, i = e % 4, n = code_of[q[e]];
                rec[64 * (2 * j + t / 4) + 4 * c + i] |= (uint8_t)((n & 3) << (2 * (t % 4)));
                rec[MM_PL_H(ue) + 64 * j + 4 * c + i] |= (uint8_t)((n >> 2) << t);
            }
        else /* the record arrives zeroed (cpu_weight_pack); word 4j + t, see MM_REC_NIB */
            for (int e = 0; e < ue; e++) {
                const int j = e / 32, i = e % 32;
                rec[64 * (4 * j + (i % 16) / 4) + 4 * c + i % 4] |= (uint8_t)(code_of[q[e]] << (i < 16 ? 0 : 4));
            }
        memcpy(rec + L.d + 4 * c, &B.d, 4);
        if (!(nib && nomin)) memcpy(rec + L.dmin + 4 * c, &B.dmin, 4);
        for (int h = 0; h < ue / 16; h++) {
            const int at = mm_dec_soff(&L, h / 2, h % 2, c);
            rec[at] = (uint8_t)B.s[h];
            if (!(nib && nomin)) rec[L.m - L.s + at] = (uint8_t)B.m[h];
        }
    }
}

#define PACK_DECODED(t, T, UE, NIB, ONE, NOMIN) \
    void mm_pack_##t(uint8_t *rec, const uint8_t *const *rows, int ncols, int64_t u) { pack_decoded(rec, rows, ncols, u, INVAR_T_##T, NIB, ONE, NOMIN); }
MM_DECODED(PACK_DECODED)

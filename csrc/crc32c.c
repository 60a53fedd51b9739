/*
 * crc32c.c -- CRC-32C (Castagnoli) for record batches, and CRC-32 (IEEE) for legacy messages.
 *
 * Kafka's v2 batch CRC is CRC-32C over bytes [21, end) of the batch: reflected polynomial
 * 0x82F63B78, initial value 0xFFFFFFFF, final XOR 0xFFFFFFFF; check value
 * crc32c("123456789") = 0xE3069283 (docs/kafka-formats.md 1.8).
 *
 * Two paths, chosen at run time:
 *  - portable: slicing-by-8 tables, about 1.5 GB/s;
 *  - VPCLMULQDQ + AVX-512 (buffers of 256 bytes or more): carry-less multiplication folds
 *    sixteen 16-byte lanes at a time (four 64-byte registers), see the note above
 *    crc_folding;
 *  - SSE4.2: the crc32 instruction has a latency of three cycles but a throughput of one
 *    or two per cycle, so a single dependency chain runs at a third (or a sixth) of the
 *    possible speed.  Long buffers are cut into six blocks (three for the short blocks
 *    at the end) hashed as independent chains; the chains are then joined by "shifting" a CRC over the length of the
 *    following block.  The shift is
 *    linear over GF(2): it is the matrix that appends n zero bytes to the raw register,
 *    precomputed at start-up into four 256-entry tables per block length.
 *
 * Invariant: both paths return identical results for every input (tests/core/test_crc.py checks
 * them against each other and against the crc32c package).
 */
#include "internal.h"
#include <pthread.h>

#define POLY_CASTAGNOLI 0x82F63B78u
#define POLY_IEEE 0xEDB88320u

static uint32_t table_c[8][256];
static uint32_t table_ieee[256];

#define LONG_BLOCK 8192
#define SHORT_BLOCK 256
static uint32_t shift_long[4][256];
static uint32_t shift_short[4][256];

static int use_hardware = -1;       /* -1 unknown, 0 portable, 1 SSE4.2, 2 VPCLMULQDQ */
static int path_limit = 2;          /* the best path allowed: lowered by tests */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void init_fold_constants(void);

/* Apply the GF(2) matrix `mat` (32 columns: mat[i] is the image of bit i) to vec. */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    for (int i = 0; vec; i++, vec >>= 1)
        if (vec & 1) sum ^= mat[i];
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
    for (int i = 0; i < 32; i++) square[i] = gf2_times(mat, mat[i]);
}

/* Matrix that advances the raw CRC register over `bytes` zero bytes. */
static void zeros_operator(uint32_t *out, size_t bytes) {
    uint32_t odd[32], even[32];
    odd[0] = POLY_CASTAGNOLI;               /* one zero bit */
    for (int i = 1; i < 32; i++) odd[i] = 1u << (i - 1);
    gf2_square(even, odd);                  /* two bits */
    gf2_square(odd, even);                  /* four bits */
    gf2_square(even, odd);                  /* eight bits: one byte, in even */
    for (int i = 0; i < 32; i++) out[i] = 1u << i;  /* identity */
    uint32_t *power = even, *spare = odd;
    while (bytes) {
        if (bytes & 1) {
            uint32_t result[32];
            for (int i = 0; i < 32; i++) result[i] = gf2_times(power, out[i]);
            memcpy(out, result, sizeof result);
        }
        bytes >>= 1;
        if (!bytes) break;
        gf2_square(spare, power);
        uint32_t *t = power; power = spare; spare = t;
    }
}

static void shift_table(uint32_t table[4][256], size_t bytes) {
    uint32_t op[32];
    zeros_operator(op, bytes);
    for (int k = 0; k < 4; k++)
        for (uint32_t v = 0; v < 256; v++) table[k][v] = gf2_times(op, v << (8 * k));
}

static inline uint32_t shift_crc(uint32_t table[4][256], uint32_t crc) {
    return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^
           table[2][(crc >> 16) & 0xff] ^ table[3][crc >> 24];
}

static void init_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n, d = n;
        for (int k = 0; k < 8; k++) {
            c = c & 1 ? (c >> 1) ^ POLY_CASTAGNOLI : c >> 1;
            d = d & 1 ? (d >> 1) ^ POLY_IEEE : d >> 1;
        }
        table_c[0][n] = c;
        table_ieee[n] = d;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = table_c[0][n];
        for (int k = 1; k < 8; k++) {
            c = table_c[0][c & 0xff] ^ (c >> 8);
            table_c[k][n] = c;
        }
    }
    shift_table(shift_long, LONG_BLOCK);
    shift_table(shift_short, SHORT_BLOCK);
    init_fold_constants();
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    use_hardware = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    if (use_hardware && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq") &&
        __builtin_cpu_supports("pclmul"))
        use_hardware = 2;
#else
    use_hardware = 0;
#endif
}

/* Raw register update, slicing-by-8. */
static uint32_t crc_portable(uint32_t crc, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        crc = table_c[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;   /* little-endian host assumed for the word path (x86-64, aarch64) */
        crc = table_c[7][w & 0xff] ^ table_c[6][(w >> 8) & 0xff] ^
              table_c[5][(w >> 16) & 0xff] ^ table_c[4][(w >> 24) & 0xff] ^
              table_c[3][(w >> 32) & 0xff] ^ table_c[2][(w >> 40) & 0xff] ^
              table_c[1][(w >> 48) & 0xff] ^ table_c[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = table_c[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

/* Hash six consecutive blocks as independent chains and join them: the running CRC is
 * shifted over each following block and xor-ed with that block's chain.  Six, not three:
 * where the crc32 instruction issues twice per cycle (AMD Zen 5) three chains leave half the
 * throughput unused (measured on the benchmark VM: 29 GB/s with three, 58 GB/s with six), and
 * where it issues once per cycle six cost nothing over three. */
__attribute__((target("sse4.2")))
static inline uint64_t crc_six_blocks(uint64_t c0, const uint8_t *p, size_t block,
                                      uint32_t table[4][256]) {
    uint64_t c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0;
    const uint8_t *end = p + block;
    do {
        uint64_t a, b, d, e, f, g;
        memcpy(&a, p, 8);
        memcpy(&b, p + block, 8);
        memcpy(&d, p + 2 * block, 8);
        memcpy(&e, p + 3 * block, 8);
        memcpy(&f, p + 4 * block, 8);
        memcpy(&g, p + 5 * block, 8);
        c0 = _mm_crc32_u64(c0, a);
        c1 = _mm_crc32_u64(c1, b);
        c2 = _mm_crc32_u64(c2, d);
        c3 = _mm_crc32_u64(c3, e);
        c4 = _mm_crc32_u64(c4, f);
        c5 = _mm_crc32_u64(c5, g);
        p += 8;
    } while (p < end);
    c0 = shift_crc(table, (uint32_t)c0) ^ (uint32_t)c1;
    c0 = shift_crc(table, (uint32_t)c0) ^ (uint32_t)c2;
    c0 = shift_crc(table, (uint32_t)c0) ^ (uint32_t)c3;
    c0 = shift_crc(table, (uint32_t)c0) ^ (uint32_t)c4;
    return shift_crc(table, (uint32_t)c0) ^ (uint32_t)c5;
}

/* The same with three chains, for the short blocks: on buffers of a few KiB streamed from
 * memory (recovery's 16 KiB batches), six chains 256 bytes apart defeat the prefetcher
 * (12 GB/s against 21 GB/s with three, measured on the benchmark VM). */
__attribute__((target("sse4.2")))
static inline uint64_t crc_three_blocks(uint64_t c0, const uint8_t *p, size_t block,
                                        uint32_t table[4][256]) {
    uint64_t c1 = 0, c2 = 0;
    const uint8_t *end = p + block;
    do {
        uint64_t a, b, d;
        memcpy(&a, p, 8);
        memcpy(&b, p + block, 8);
        memcpy(&d, p + 2 * block, 8);
        c0 = _mm_crc32_u64(c0, a);
        c1 = _mm_crc32_u64(c1, b);
        c2 = _mm_crc32_u64(c2, d);
        p += 8;
    } while (p < end);
    c0 = shift_crc(table, (uint32_t)c0) ^ (uint32_t)c1;
    return shift_crc(table, (uint32_t)c0) ^ (uint32_t)c2;
}

__attribute__((target("sse4.2")))
static uint32_t crc_hardware(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c0 = crc;
    while (n && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        n--;
    }
    /* Six interleaved chains over blocks of LONG_BLOCK, then three over SHORT_BLOCK bytes. */
    while (n >= 6 * LONG_BLOCK) {
        c0 = crc_six_blocks(c0, p, LONG_BLOCK, shift_long);
        p += 6 * LONG_BLOCK;
        n -= 6 * LONG_BLOCK;
    }
    while (n >= 3 * SHORT_BLOCK) {
        c0 = crc_three_blocks(c0, p, SHORT_BLOCK, shift_short);
        p += 3 * SHORT_BLOCK;
        n -= 3 * SHORT_BLOCK;
    }
    while (n >= 8) {
        uint64_t a;
        memcpy(&a, p, 8);
        c0 = _mm_crc32_u64(c0, a);
        p += 8;
        n -= 8;
    }
    while (n--) c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0;
}
#endif

/* ---- folding with carry-less multiplication (VPCLMULQDQ + AVX-512) ---------------------
 *
 * With a zero initial register the raw CRC is M(x) * x^32 mod P, so any 16-byte lane A may be
 * replaced by zeros if a polynomial congruent to A(x) * x^(8d) mod P is xor-ed into the lane
 * d bytes further on.  In the reflected bit order a lane loaded little-endian holds
 * A = L * x^64 + H (L its first eight bytes), and
 *     A * x^(8d) == L * (x^(8d+32) mod P) * x^32 + H * (x^(8d-32) mod P) * x^32   (mod P),
 * two 64 x 32-bit carry-less products of at most 95 bits each.  Stored reflected and shifted
 * left by one, a constant k' makes PCLMULQDQ's product land with its bits where the lane
 * d bytes on keeps the same powers of x, so one xor adds it in.  The constants are computed
 * at start-up from the polynomial (fold_constant), one pair per distance.
 *
 * The kernel keeps four 64-byte registers (sixteen lanes) and folds them 256 bytes ahead,
 * then folds the four into one, the one's four lanes into one lane, and whole lanes of what
 * is left into that lane.  The last lane and the bytes after it go through the crc32
 * instruction from a zero register: the lanes before them are zeros by then. */
#define POLY_CASTAGNOLI_NORMAL 0x1EDC6F41u
#define FOLD_MIN 256

enum { FOLD_256, FOLD_192, FOLD_128, FOLD_64, FOLD_48, FOLD_32, FOLD_16, FOLDS };
static const unsigned fold_distance[FOLDS] = {256, 192, 128, 64, 48, 32, 16};
static uint64_t fold_k[FOLDS][2] __attribute__((aligned(16)));

/* reflect32(x^n mod P) << 1 */
static uint64_t fold_constant(unsigned n) {
    uint32_t v = 1, r = 0;
    while (n--) v = (v & 0x80000000u) ? (v << 1) ^ POLY_CASTAGNOLI_NORMAL : v << 1;
    for (int i = 0; i < 32; i++)
        if (v >> i & 1) r |= 1u << (31 - i);
    return (uint64_t)r << 1;
}

static void init_fold_constants(void) {
    for (int i = 0; i < FOLDS; i++) {
        fold_k[i][0] = fold_constant(8 * fold_distance[i] + 32);
        fold_k[i][1] = fold_constant(8 * fold_distance[i] - 32);
    }
}

#if defined(__x86_64__)
#include <immintrin.h>
#define FOLD_TARGET __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2")))

FOLD_TARGET static inline __m512i fold_zmm(__m512i acc, __m512i k, __m512i next) {
    __m512i low = _mm512_clmulepi64_epi128(acc, k, 0x00);
    __m512i high = _mm512_clmulepi64_epi128(acc, k, 0x11);
    return _mm512_ternarylogic_epi64(low, high, next, 0x96);    /* three-way xor */
}

FOLD_TARGET static inline __m128i fold_xmm(__m128i acc, __m128i k, __m128i next) {
    __m128i low = _mm_clmulepi64_si128(acc, k, 0x00);
    __m128i high = _mm_clmulepi64_si128(acc, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(low, high), next);
}

FOLD_TARGET static inline __m128i k_xmm(int which) {
    return _mm_load_si128((const __m128i *)fold_k[which]);
}

FOLD_TARGET static inline __m512i k_zmm(int which) {
    return _mm512_broadcast_i32x4(k_xmm(which));
}

/* Requires n >= FOLD_MIN. */
FOLD_TARGET static uint32_t crc_folding(uint32_t crc, const uint8_t *p, size_t n) {
    __m512i x0 = _mm512_loadu_si512(p), x1 = _mm512_loadu_si512(p + 64);
    __m512i x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
    /* the initial register enters as the first four message bytes xor-ed with it */
    x0 = _mm512_xor_si512(x0, _mm512_inserti32x4(_mm512_setzero_si512(),
                                                 _mm_cvtsi32_si128((int)crc), 0));
    p += 256;
    n -= 256;
    __m512i k = k_zmm(FOLD_256);
    while (n >= 256) {
        x0 = fold_zmm(x0, k, _mm512_loadu_si512(p));
        x1 = fold_zmm(x1, k, _mm512_loadu_si512(p + 64));
        x2 = fold_zmm(x2, k, _mm512_loadu_si512(p + 128));
        x3 = fold_zmm(x3, k, _mm512_loadu_si512(p + 192));
        p += 256;
        n -= 256;
    }
    x3 = fold_zmm(x0, k_zmm(FOLD_192), x3);
    x3 = fold_zmm(x1, k_zmm(FOLD_128), x3);
    x3 = fold_zmm(x2, k_zmm(FOLD_64), x3);
    for (k = k_zmm(FOLD_64); n >= 64; p += 64, n -= 64)
        x3 = fold_zmm(x3, k, _mm512_loadu_si512(p));
    __m128i lane = _mm512_extracti32x4_epi32(x3, 3);
    lane = fold_xmm(_mm512_extracti32x4_epi32(x3, 0), k_xmm(FOLD_48), lane);
    lane = fold_xmm(_mm512_extracti32x4_epi32(x3, 1), k_xmm(FOLD_32), lane);
    lane = fold_xmm(_mm512_extracti32x4_epi32(x3, 2), k_xmm(FOLD_16), lane);
    for (__m128i k16 = k_xmm(FOLD_16); n >= 16; p += 16, n -= 16)
        lane = fold_xmm(lane, k16, _mm_loadu_si128((const __m128i *)p));
    uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(lane));
    c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(lane, 1));
    return crc_hardware((uint32_t)c, p, n);
}
#endif

uint32_t plog_crc32c(uint32_t crc, const uint8_t *data, size_t length) {
    PLOG_ASSERT(data != NULL || length == 0);
    pthread_once(&init_once, init_tables);
    uint32_t raw = ~crc;
    int path = use_hardware < path_limit ? use_hardware : path_limit;
#if defined(__x86_64__)
    if (path == 2 && length >= FOLD_MIN) return ~crc_folding(raw, data, length);
    if (path >= 1) return ~crc_hardware(raw, data, length);
#endif
    return ~crc_portable(raw, data, length);
}

int plog_crc32c_path(void) {
    pthread_once(&init_once, init_tables);
    return use_hardware < path_limit ? use_hardware : path_limit;
}

void plog_crc32c_limit(int path) {
    pthread_once(&init_once, init_tables);
    path_limit = path < 0 ? 0 : path > 2 ? 2 : path;
}

uint32_t plog_crc32_ieee(uint32_t crc, const uint8_t *data, size_t length) {
    PLOG_ASSERT(data != NULL || length == 0);
    pthread_once(&init_once, init_tables);
    uint32_t c = ~crc;
    while (length--) c = table_ieee[(c ^ *data++) & 0xff] ^ (c >> 8);
    return ~c;
}

#include <cstdint>
#include <cstdio>
static uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {  // CUDA __byte_perm (default mode)
  uint64_t v = ((uint64_t)y << 32) | x; uint32_t r = 0;
  for (int i = 0; i < 4; ++i) { uint32_t sel = (s >> (4 * i)) & 7; r |= (uint32_t)((v >> (8 * sel)) & 0xff) << (8 * i); }
  return r;
}
static void old_dec(uint32_t w, uint32_t (&p)[4]) {
  for (int j = 0; j < 4; ++j) { uint32_t v = w << (12 - 4 * j); p[j] = (v & 0x80008000u) | ((v >> 3) & 0x0e000e00u); }
}
static void new_dec(uint32_t w, uint32_t (&p)[4]) {
  const uint32_t hi = w & 0xf0f0f0f0u, lo = (w << 4) & 0xf0f0f0f0u;
  const uint32_t hh = (hi | (hi >> 3)) & 0x8e8e8e8eu, hl = (lo | (lo >> 3)) & 0x8e8e8e8eu;
  p[0] = byte_perm(hl, 0u, 0x2404); p[1] = byte_perm(hh, 0u, 0x2404);
  p[2] = byte_perm(hl, 0u, 0x3414); p[3] = byte_perm(hh, 0u, 0x3414);
}
int main() {
  uint64_t bad = 0;
  for (uint64_t x = 0; x <= 0xffffffffull; ++x) {
    uint32_t a[4], b[4]; old_dec((uint32_t)x, a); new_dec((uint32_t)x, b);
    for (int j = 0; j < 4; ++j) if (a[j] != b[j]) { if (bad < 3) printf("x=%08llx j=%d %08x %08x\n", (unsigned long long)x, j, a[j], b[j]); ++bad; }
  }
  printf("mismatches: %llu of 2^32 words\n", (unsigned long long)bad);
  return bad != 0;
}

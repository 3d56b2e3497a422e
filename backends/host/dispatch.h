// Run-time ISA dispatch for the kernels' inner loops. The library is built for baseline x86-64
// (SSE2) so it loads on any x86-64 machine; loops marked TESSERA_HOST_KERNEL are also compiled for
// AVX2 and the dynamic loader picks the version the CPU supports (GCC/Clang target_clones, an
// ifunc). Only the marked function bodies get AVX2 code, so no AVX2 instruction can leak into
// code shared with the baseline path. noinline keeps each loop a separate function, which also
// keeps GCC from fusing loops across calls and losing their __restrict information. GCC only:
// Clang (14) refuses target_clones with noinline and on templates, so there the loops are
// baseline code.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(TESSERA_HOST_NO_DISPATCH)
#define TESSERA_HOST_KERNEL __attribute__((target_clones("avx2", "default"), noinline))
#else
#define TESSERA_HOST_KERNEL __attribute__((noinline))
#endif

// The CTS kernels in OpenCL C for SPIR-V (hal/cts/kernels/README.md; semantics in backend_abi.h's
// module section and docs/PORTING.md): clang -target spir64 -> llvm-spirv -> cts_kernels.spv, for
// zeModuleCreate. The launch's shared bytes have no place in a Level Zero launch (dynamic local
// memory would be an extra __local argument), so block_sum reduces in a fixed 1024-float local
// array: the contract's block.x is a power of two <= 1024.

// c[i] = a[i] + b[i] for the global index i < n.
kernel void tsr_cts_vector_add(global const float* a, global const float* b, global float* c,
                               uint n) {
  const ulong i = (ulong)get_group_id(0) * get_local_size(0) + get_local_id(0);
  if (i < n) c[i] = a[i] + b[i];
}

// partial[b] = sum of x over block b's chunk [b * chunk, min(n, (b + 1) * chunk)), chunk =
// ceil(n / number of groups). The group size is a power of two <= 1024.
kernel void tsr_cts_block_sum(global const float* x, global float* partial, uint n) {
  local float scratch[1024];
  const ulong groups = get_num_groups(0);
  const ulong chunk = ((ulong)n + groups - 1) / groups;
  const ulong begin = (ulong)get_group_id(0) * chunk;
  const ulong end = begin + chunk < n ? begin + chunk : n;
  const uint lid = get_local_id(0);
  const uint size = get_local_size(0);
  float sum = 0.0f;
  for (ulong i = begin + lid; i < end; i += size) sum += x[i];
  scratch[lid] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint stride = size / 2; stride > 0; stride /= 2) {
    if (lid < stride) scratch[lid] += scratch[lid + stride];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) partial[get_group_id(0)] = scratch[0];
}

// A block of a cluster maps another block's shared memory and stores to it (distributed shared memory outside the
// multicast copy and the remote slot free): rule no_peer_shared_memory.
extern "C" __global__ void peer_store(float* __restrict__ C)
{
    __shared__ float tile_[128];
    float* peer_ = (float*)__cluster_map_shared_rank((void*)tile_, 1);
    peer_[threadIdx.x] = C[threadIdx.x];
}

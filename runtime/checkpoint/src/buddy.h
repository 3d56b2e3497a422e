// Where a rank's peer replica lives (replica.cc): the ring r -> (r + stride) % size. With
// `replica_stride` 0 (the default) the stride is chosen from the hosts the ranks run on, so that a
// rank's copy lives on another host whenever the group spans hosts and one lost node loses no
// state. Internal to runtime/checkpoint.
#pragma once

#include <string>
#include <vector>

namespace tessera::ckpt {

// This process's host as the collectives see it: TESSERA_HOST_ID when set (emulated hosts,
// containers sharing a kernel), else the host name and a hash of the kernel's boot id.
std::string buddy_host_identity();

// The stride for ranks whose hosts are `host_of_rank` (any identifiers; equal means same host):
// the smallest stride in 1..size-1 that puts every rank's buddy on another host; where none does
// (hosts of unequal size), the smallest one that puts the most buddies on another host; 1 on one
// host or for a group of one.
int replica_stride_for_hosts(const std::vector<std::string>& host_of_rank);

// How many ranks' buddies share their host under `stride` (0: one lost host loses no state).
int buddies_on_same_host(const std::vector<std::string>& host_of_rank, int stride);

}  // namespace tessera::ckpt

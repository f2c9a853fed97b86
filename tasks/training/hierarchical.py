"""Hierarchical allreduce as a DDP communication hook.

Flat allreduce has every rank hand its whole gradient bucket to a collective that
spans every node. Hierarchical: ranks first reduce inside their node to the node's
leader (fast local links), only the leaders allreduce across nodes, then each leader
broadcasts the sum inside its node. The result equals flat allreduce; the bytes that
cross node boundaries drop by the local world size.

Nodes are runs of `local_size` consecutive global ranks (torchrun numbers ranks node
by node). Every rank creates every group, in the same order, as torch requires.
"""

# No `from __future__ import annotations` here: DDP checks the hooks' return annotation object.
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass
class HierarchicalState:
    local_size: int
    intra_group: object = None
    leader_group: object = None
    leader: int = 0  # global rank of this rank's node leader
    is_leader: bool = False
    internode_bytes: int = 0  # bytes this rank handed to collectives spanning several nodes
    calls: int = field(default=0)

    @classmethod
    def build(cls, local_size: int) -> "HierarchicalState":
        world, rank = dist.get_world_size(), dist.get_rank()
        if local_size < 1 or world % local_size:
            raise ValueError(f"world size {world} is not a multiple of the local size {local_size}")
        state = cls(local_size=local_size)
        for node in range(world // local_size):
            ranks = list(range(node * local_size, (node + 1) * local_size))
            group = dist.new_group(ranks)
            if rank in ranks:
                state.intra_group, state.leader = group, ranks[0]
        leaders = list(range(0, world, local_size))
        leader_group = dist.new_group(leaders)
        state.is_leader = rank in leaders
        state.leader_group = leader_group if state.is_leader else None
        return state


def hierarchical_allreduce_hook(state: HierarchicalState, bucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: reduce in the node, allreduce among leaders, broadcast in the node, average."""
    tensor = bucket.buffer()
    dist.reduce(tensor, dst=state.leader, group=state.intra_group)
    if state.is_leader:
        state.internode_bytes += tensor.numel() * tensor.element_size()
        dist.all_reduce(tensor, group=state.leader_group)
    dist.broadcast(tensor, src=state.leader, group=state.intra_group)
    tensor.div_(dist.get_world_size())
    state.calls += 1
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(tensor)
    return fut


@dataclass
class FlatState:
    """Plain allreduce with the same byte accounting (the baseline for the benchmark)."""

    nodes: int
    internode_bytes: int = 0
    calls: int = 0


def flat_allreduce_hook(state: FlatState, bucket) -> torch.futures.Future[torch.Tensor]:
    tensor = bucket.buffer()
    if state.nodes > 1:  # one collective over every rank: it spans the nodes
        state.internode_bytes += tensor.numel() * tensor.element_size()
    dist.all_reduce(tensor)
    tensor.div_(dist.get_world_size())
    state.calls += 1
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(tensor)
    return fut

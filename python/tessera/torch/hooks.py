"""DDP communication hooks backed by Tessera's overlap-engine codecs (runtime/overlap,
docs/OVERLAP.md "Gradient compression"): bf16 on the wire, top-k with error feedback, and
PowerSGD. Registered like torch's own hooks:

    from tessera.torch import hooks
    state = hooks.PowerSGDState(rank=4)          # or TopKState(ratio=0.01), Bf16State()
    ddp_model.register_comm_hook(state, hooks.powersgd_hook)
    ...
    ckpt = {"model": ddp_model.state_dict(), "hook": state.state_dict()}
    state.load_state_dict(ckpt["hook"])           # error feedback and PowerSGD's Q come back

Each hook reduces one DDP bucket (a flat tensor) to the average over the process group, as the
engine's codec reduces one of its buckets: top-k's selection and decoding and PowerSGD's shape,
initial Q and orthonormalisation are the engine's own host functions (tessera._tessera.codecs),
so a hook compresses exactly as the engine does; the products run as torch operations and the
collectives through the DDP process group (any backend: gloo, tessera, nccl). Buckets that are not
float32 (and, for PowerSGD, buckets its factors would not make smaller) are plainly averaged, as in
the engine. The hooks run on CPU tensors; accelerator buckets are staged through host memory.
DDP lays a bucket out in one order in the first iteration of a DDP object and rebuilds it in the
order gradients become ready afterwards. The hooks therefore compress each bucket in a canonical
order (its parameters' positions in the first layout they were seen in, which every fresh DDP
object of the same model repeats) and keep error feedback per parameter and PowerSGD's Q per set
of parameters: state saved in one layout resumes in the other.
"""

import torch
import torch.distributed as dist

from .._tessera import codecs as _codecs

__all__ = ["Bf16State", "TopKState", "PowerSGDState", "bf16_hook", "topk_hook",
           "powersgd_hook"]


class _State:
    kind = ""

    def __init__(self, process_group=None):
        self.process_group = process_group
        self.iteration = 0  # completed DDP iterations (counted at each last bucket)
        self._param_keys = {}  # id(parameter) -> its position in the first layout it was seen in

    def _group(self):
        return self.process_group if self.process_group is not None else dist.group.WORLD

    def _world(self):
        return dist.get_world_size(self._group())

    def _options(self):
        return {}

    def _tensors(self):
        return {}

    def state_dict(self):
        """The hook's options, iteration and per-bucket tensors (CPU copies): save it beside the
        model's state dict."""
        return {"kind": self.kind, "iteration": self.iteration, "options": self._options(),
                "tensors": {index: {name: t.detach().clone().cpu() for name, t in tensors.items()}
                            for index, tensors in self._tensors().items()}}

    def load_state_dict(self, state):
        """Restores what state_dict() returned (options must match: they shape the tensors)."""
        if state.get("kind") != self.kind:
            raise ValueError(f"{type(self).__name__}.load_state_dict: state of a "
                             f"'{state.get('kind')}' hook, this is '{self.kind}'")
        if state.get("options") != self._options():
            raise ValueError(f"{type(self).__name__}.load_state_dict: saved options "
                             f"{state.get('options')} differ from {self._options()}")
        self.iteration = int(state["iteration"])
        self._restore({index: {name: t.detach().clone() for name, t in tensors.items()}
                       for index, tensors in state["tensors"].items()})

    def _restore(self, buckets):
        pass

    def _count(self, bucket):
        if bucket.is_last():
            self.iteration += 1


class _Layout:
    """A bucket's parameters in canonical order: (bucket index, position) of each parameter in
    the first bucket layout the state saw it in."""

    def __init__(self, state, bucket):
        params = bucket.parameters()
        keys = []
        for position, p in enumerate(params):
            key = state._param_keys.setdefault(id(p), bucket.index() * 1_000_000 + position)
            keys.append(key)
        offsets, offset = [], 0
        for p in params:
            offsets.append(offset)
            offset += p.numel()
        order = sorted(range(len(params)), key=keys.__getitem__)
        self.keys = [keys[i] for i in order]
        self.segments = [(offsets[i], params[i].numel()) for i in order]
        self.identity = order == list(range(len(params)))
        self.name = ",".join(str(k) for k in self.keys)  # the parameter set (PowerSGD's Q)

    def gather(self, flat):
        """The bucket's values in canonical order (a new tensor)."""
        if self.identity:
            return flat.detach().clone()
        return torch.cat([flat[o:o + n] for o, n in self.segments])

    def scatter(self, canonical, flat):
        """Writes canonical-order values back into the bucket's layout."""
        if self.identity:
            flat.copy_(canonical)
            return
        at = 0
        for o, n in self.segments:
            flat[o:o + n].copy_(canonical[at:at + n])
            at += n

    def join(self, pieces, total):
        """Per-parameter tensors (missing or mis-sized: zeros) as one canonical-order tensor."""
        out = torch.zeros(total, dtype=torch.float32)
        at = 0
        for key, (_, n) in zip(self.keys, self.segments):
            piece = pieces.get(key)
            if piece is not None and piece.numel() == n:
                out[at:at + n] = piece
            at += n
        return out

    def split(self, canonical, pieces):
        at = 0
        for key, (_, n) in zip(self.keys, self.segments):
            pieces[key] = canonical[at:at + n].clone()
            at += n


def _average(state, buffer):
    """The plain path: allreduce, then divide by the world size."""
    world = state._world()
    fut = dist.all_reduce(buffer, group=state._group(), async_op=True).get_future()
    return fut.then(lambda f: f.value()[0].div_(world))


def _host_f32(buffer):
    """The bucket as a contiguous CPU float32 tensor (the bucket itself when it is one)."""
    if buffer.device.type == "cpu" and buffer.is_contiguous():
        return buffer
    return buffer.detach().to("cpu").contiguous()


def _finish(buffer, host):
    if host is not buffer:
        buffer.copy_(host)
    return buffer


# ---- bf16 -------------------------------------------------------------------------------------

class Bf16State(_State):
    """bf16 on the wire: the bucket is cast to bfloat16 (round to nearest even, the rounding of
    the engine's device cast), reduced, and cast back."""

    kind = "bf16"


def bf16_hook(state, bucket):
    state._count(bucket)
    buffer = bucket.buffer()
    if buffer.dtype != torch.float32:
        return _average(state, buffer)
    world = state._world()
    wire = buffer.to(torch.bfloat16)
    group = state._group()
    if dist.get_backend(group) != "gloo":
        fut = dist.all_reduce(wire, group=group, async_op=True).get_future()

        def decode(f):
            return buffer.copy_(f.value()[0].to(torch.float32).div_(world))
        return fut.then(decode)
    # gloo has no bf16 reduction: the bf16 payloads are all-gathered as bytes and summed in f32
    # in rank order (the same bits on every rank).
    payload = wire.view(torch.uint8)
    gathered = [torch.empty_like(payload) for _ in range(world)]
    fut = dist.all_gather(gathered, payload, group=group, async_op=True).get_future()

    def decode_gathered(f):
        total = torch.zeros_like(buffer)
        for part in gathered:
            total += part.view(torch.bfloat16).to(torch.float32)
        return buffer.copy_(total.div_(world))
    return fut.then(decode_gathered)


# ---- top-k with error feedback ----------------------------------------------------------------

class TopKState(_State):
    """Top-k: each rank sends the k = ceil(ratio * n) largest entries of (gradient + residual)
    as (index, value) pairs; the pairs of all ranks are summed. With error_feedback, what was
    not sent is kept and added to the next step's gradient."""

    kind = "topk"

    def __init__(self, ratio=0.01, error_feedback=True, process_group=None):
        super().__init__(process_group)
        if not 0.0 < ratio <= 1.0:
            raise ValueError(f"TopKState: ratio {ratio} is not in (0, 1]")
        self.ratio = float(ratio)
        self.error_feedback = bool(error_feedback)
        self.residuals = {}  # parameter key -> float32 tensor (what was not sent)
        self._selectors = {}

    def _options(self):
        return {"ratio": self.ratio, "error_feedback": self.error_feedback}

    def _tensors(self):
        return {key: {"residual": r} for key, r in self.residuals.items()}

    def _restore(self, buckets):
        self.residuals = {int(key): t["residual"].to(torch.float32).contiguous()
                          for key, t in buckets.items()}


def topk_hook(state, bucket):
    state._count(bucket)
    buffer = bucket.buffer()
    if buffer.dtype != torch.float32:
        return _average(state, buffer)
    layout, host = _Layout(state, bucket), _host_f32(buffer)
    n = host.numel()
    k = _codecs.topk_k(state.ratio, n)
    acc = layout.gather(host)
    if state.error_feedback:
        acc += layout.join(state.residuals, n)
    pairs = torch.empty(2 * k, dtype=torch.int32)
    selector = state._selectors.setdefault(bucket.index(), _codecs.TopKSelector())
    _codecs.topk_encode(selector, acc.numpy(), k, state.error_feedback, pairs.numpy())
    if state.error_feedback:
        layout.split(acc, state.residuals)  # the sent entries are now 0
    world = state._world()
    gathered = [torch.empty_like(pairs) for _ in range(world)]
    fut = dist.all_gather(gathered, pairs, group=state._group(), async_op=True).get_future()

    def decode(f):
        out = torch.empty(n, dtype=torch.float32)
        _codecs.topk_decode(torch.cat(gathered).numpy(), world, k, True, out.numpy())
        layout.scatter(out, host)
        return _finish(buffer, host)
    return fut.then(decode)


# ---- PowerSGD ---------------------------------------------------------------------------------

class PowerSGDState(_State):
    """PowerSGD (Vogels et al., 2019) on each bucket viewed as a rows x cols matrix M:
    M += error; P = M Q; average P; orthonormalise P; Q = M^T P; average Q; the bucket becomes
    P Q^T and error = M - P Q^T. Q is kept between steps (warm start) and starts as the engine's
    pseudo-random matrix from `seed` and the bucket index, the same on every rank."""

    kind = "powersgd"

    def __init__(self, rank=4, error_feedback=True, seed=1, process_group=None):
        super().__init__(process_group)
        if int(rank) < 1:
            raise ValueError(f"PowerSGDState: rank {rank} must be >= 1")
        self.rank = int(rank)
        self.error_feedback = bool(error_feedback)
        self.seed = int(seed)
        self.errors = {}  # parameter key -> float32 tensor (error feedback)
        self.qs = {}  # parameter set ("key,key,...") -> float32 tensor cols x r

    def _options(self):
        return {"rank": self.rank, "error_feedback": self.error_feedback, "seed": self.seed}

    def _tensors(self):
        out = {"q:" + name: {"q": q} for name, q in self.qs.items()}
        out.update({"error:" + str(key): {"error": e} for key, e in self.errors.items()})
        return out

    def _restore(self, buckets):
        self.qs = {name[2:]: t["q"].to(torch.float32).contiguous()
                   for name, t in buckets.items() if name.startswith("q:")}
        self.errors = {int(name[6:]): t["error"].to(torch.float32).contiguous()
                       for name, t in buckets.items() if name.startswith("error:")}

    def _q(self, layout, index, cols, r):
        q = self.qs.get(layout.name)
        if q is None or q.shape != (cols, r):
            q = torch.empty(cols, r, dtype=torch.float32)
            _codecs.powersgd_initial_q(self.seed, index, q.numpy())
            self.qs[layout.name] = q
        return q


def powersgd_hook(state, bucket):
    state._count(bucket)
    buffer = bucket.buffer()
    n = buffer.numel()
    if buffer.dtype != torch.float32 or not _codecs.powersgd_compresses(n, state.rank):
        return _average(state, buffer)
    layout, host = _Layout(state, bucket), _host_f32(buffer)
    rows, cols, r = _codecs.powersgd_shape(n, state.rank)
    m = torch.zeros(rows * cols, dtype=torch.float32)
    m[:n] = layout.gather(host)
    if state.error_feedback:
        m[:n] += layout.join(state.errors, n)
    m = m.view(rows, cols)
    q = state._q(layout, bucket.index(), cols, r)
    p = m @ q
    world, group = state._world(), state._group()
    fut = dist.all_reduce(p, group=group, async_op=True).get_future()

    def second_half(f):
        p.div_(world)
        _codecs.powersgd_orthonormalise(p.numpy(), rows, r)
        q_new = m.t() @ p
        # Blocking, as in torch's PowerSGD hook: the second reduction needs the first's result.
        dist.all_reduce(q_new, group=group)
        q_new.div_(world)
        approx = p @ q_new.t()
        state.qs[layout.name] = q_new
        if state.error_feedback:
            layout.split((m - approx).reshape(-1)[:n], state.errors)
        layout.scatter(approx.reshape(-1)[:n], host)
        return _finish(buffer, host)
    return fut.then(second_half)

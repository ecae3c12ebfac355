"""A small model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp).

It keeps the allocator's bookkeeping and none of its memory: segments (what cudaMalloc, or the
virtual-memory API for expandable segments, handed out), the blocks they are split into, the two
pools of free blocks, and the statistics `torch.cuda.memory_stats()` reports. It follows the rules
of the C++ source for one device and one stream:

- sizes round up to 512 B; requests of at most 1 MiB go to the small pool, larger ones to the large;
- a new segment is 2 MiB (small), 20 MiB (large, request under 10 MiB) or the request rounded up
  to 2 MiB (large, 10 MiB and above);
- best fit: the smallest free block of the pool that is large enough (ties: the lower address);
- a block is split when the remainder is at least 512 B (small pool, or expandable segments) or
  more than 1 MiB (large pool), and never when the request is at least `max_split_size`;
- `max_split_size`: a request below it may not take a free block at or above it, and a request
  at or above it may take a free block only if that block is less than 20 MiB larger;
- freeing merges the block with free neighbours of the same segment;
- `empty_cache` gives back every free block that is a whole segment (with expandable segments:
  every whole free page inside a free block);
- when the capacity is exceeded: free the cached oversize blocks (`max_split_size` set), then every
  whole free segment, retry, and raise `OutOfMemory` with the numbers PyTorch prints.

Not modelled: several streams (`record_stream`, per-stream pools), CUDA-graph private pools,
`roundup_power2_divisions`, `garbage_collection_threshold`, and memory used outside the allocator.
"""
from __future__ import annotations

from dataclasses import dataclass, field

KiB = 1024
MiB = 1024 * KiB

# --8<-- [start:rules]
MIN_BLOCK = 512            # kMinBlockSize: every size is rounded up to a multiple of 512 B
SMALL_SIZE = 1 * MiB       # kSmallSize: requests up to 1 MiB use the small pool
SMALL_BUFFER = 2 * MiB     # kSmallBuffer: small pool segments are 2 MiB
LARGE_BUFFER = 20 * MiB    # kLargeBuffer: large requests under 10 MiB get a 20 MiB segment
MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc
ROUND_LARGE = 2 * MiB      # kRoundLarge: larger requests are rounded up to 2 MiB


def round_size(nbytes: int) -> int:
    """The block size a request of `nbytes` occupies."""
    if nbytes < MIN_BLOCK:
        return MIN_BLOCK
    return MIN_BLOCK * ((nbytes + MIN_BLOCK - 1) // MIN_BLOCK)


def pool_of(size: int) -> str:
    return "small" if size <= SMALL_SIZE else "large"


def allocation_size(size: int) -> int:
    """How much a cache miss asks cudaMalloc for."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((size + ROUND_LARGE - 1) // ROUND_LARGE)


def should_split(block_size: int, size: int, small: bool, expandable: bool, max_split: float) -> bool:
    """Whether the remainder of a block chosen for `size` goes back to the pool as a free block."""
    remaining = block_size - size
    if small or expandable:
        return remaining >= MIN_BLOCK
    return size < max_split and remaining > SMALL_SIZE
# --8<-- [end:rules]


class OutOfMemory(RuntimeError):
    """What the model raises where PyTorch raises torch.OutOfMemoryError."""


@dataclass(eq=False)
class Segment:
    base: int
    size: int                 # cudaMalloc'ed bytes, or the reserved address space (expandable)
    pool: str
    expandable: bool = False
    page: int = 0             # mapping granularity of an expandable segment
    head: "Block | None" = None


@dataclass(eq=False)
class Block:
    seg: Segment
    ptr: int
    size: int
    mapped: bool = True
    allocated: bool = False
    requested: int = 0
    prev: "Block | None" = None
    next: "Block | None" = None

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


@dataclass
class CachingAllocatorModel:
    """One device, one stream. `capacity` (bytes) bounds what segments may reserve."""

    expandable_segments: bool = False
    max_split_size_mb: int | None = None
    capacity: int = 1 << 50
    address_space: int = 256 * 1024 * MiB   # per expandable segment; any value far above use
    segments: list = field(default_factory=list)
    free_blocks: dict = field(default_factory=lambda: {"small": set(), "large": set()})
    unmapped: dict = field(default_factory=lambda: {"small": set(), "large": set()})
    num_device_alloc: int = 0
    num_device_free: int = 0
    num_alloc_retries: int = 0
    _next_base: int = 1 << 32

    @property
    def max_split(self) -> float:
        return float("inf") if self.max_split_size_mb is None else self.max_split_size_mb * MiB

    # --8<-- [start:malloc]
    def malloc(self, nbytes: int) -> Block:
        size = round_size(nbytes)
        pool = pool_of(size)
        block = self._get_free_block(pool, size)
        if block is None:
            block = self._alloc_block(pool, size)
        if block is None and self._release_available_cached_blocks(pool, size):
            block = self._alloc_block(pool, size)
        if block is None:
            self.empty_cache()
            self.num_alloc_retries += 1
            block = self._alloc_block(pool, size)
        if block is None:
            st = self.stats()
            raise OutOfMemory(
                f"Tried to allocate {allocation_size(size)} bytes; {st['allocated_bytes']} allocated, "
                f"{st['reserved_bytes'] - st['allocated_bytes']} reserved but unallocated")
        if should_split(block.size, size, pool == "small", self.expandable_segments, self.max_split):
            rest = Block(block.seg, block.ptr + size, block.size - size, prev=block, next=block.next)
            if block.next:
                block.next.prev = rest
            block.next, block.size = rest, size
            self.free_blocks[pool].add(rest)
        block.allocated, block.requested = True, nbytes
        return block

    def _get_free_block(self, pool: str, size: int) -> Block | None:
        fits = sorted((b for b in self.free_blocks[pool] if b.size >= size), key=lambda b: (b.size, b.ptr))
        if not fits:
            return None
        i = 0
        if fits[0].seg.expandable and self.expandable_segments:
            # prefer a block whose size plus the unmapped space after it is smaller
            def room(b):
                return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)
            while i + 1 < len(fits) and fits[i].seg.expandable and room(fits[i + 1]) < room(fits[i]):
                i += 1
        best = fits[i]
        if size < self.max_split <= best.size:
            return None            # an oversize block may not serve a smaller request
        if size >= self.max_split and best.size >= size + LARGE_BUFFER:
            return None            # nor a request it would over-serve by 20 MiB or more
        self.free_blocks[pool].discard(best)
        return best
    # --8<-- [end:malloc]

    def _alloc_block(self, pool: str, size: int) -> Block | None:
        if self.expandable_segments:
            return self._alloc_expandable(pool, size)
        nbytes = allocation_size(size)
        if self.stats()["reserved_bytes"] + nbytes > self.capacity:
            return None
        seg = Segment(self._next_base, nbytes, pool)
        self._next_base += nbytes + ROUND_LARGE
        seg.head = Block(seg, seg.base, nbytes)
        self.segments.append(seg)
        self.num_device_alloc += 1
        return seg.head

    # ---- free, merge, empty_cache
    # --8<-- [start:free]
    def free(self, block: Block) -> None:
        assert block.allocated, "double free"
        block.allocated, block.requested = False, 0
        for neighbour in (block.prev, block.next):
            self._try_merge(block, neighbour)
        self.free_blocks[block.seg.pool].add(block)

    def _try_merge(self, dst: Block, src: Block | None) -> int:
        if src is None or src.allocated or src.mapped != dst.mapped:
            return 0
        if dst.prev is src:                     # [src dst]
            dst.ptr, dst.prev = src.ptr, src.prev
            if dst.prev:
                dst.prev.next = dst
            if dst.seg.head is src:
                dst.seg.head = dst
        else:                                   # [dst src]
            dst.next = src.next
            if dst.next:
                dst.next.prev = dst
        dst.size += src.size
        (self.free_blocks if src.mapped else self.unmapped)[src.seg.pool].discard(src)
        return src.size

    def empty_cache(self) -> None:
        for pool in ("large", "small"):
            for block in sorted(self.free_blocks[pool], key=lambda b: (b.size, b.ptr)):
                if block.seg.expandable:
                    self._unmap(block)
                elif not block.is_split():      # a whole free segment goes back to cudaFree
                    self.free_blocks[pool].discard(block)
                    self.segments.remove(block.seg)
                    self.num_device_free += 1
    # --8<-- [end:free]

    def _release_available_cached_blocks(self, pool: str, size: int) -> bool:
        """With max_split_size set: cudaFree cached oversize blocks before the full flush."""
        if self.max_split_size_mb is None:
            return False
        key = max(size, self.max_split)
        whole = sorted((b for b in self.free_blocks[pool] if not b.is_split() and not b.seg.expandable),
                       key=lambda b: (b.size, b.ptr))
        fit = [b for b in whole if b.size >= key]
        victims = fit[:1]
        if not victims:
            released = 0
            for b in reversed([b for b in whole if b.size >= self.max_split]):
                if released >= key:
                    break
                victims.append(b)
                released += b.size
            if released < key:
                victims = []
        for b in victims:
            self.free_blocks[pool].discard(b)
            self.segments.remove(b.seg)
            self.num_device_free += 1
        return bool(victims)

    # ---- expandable segments: one growing segment per pool, mapped in pages
    def _alloc_expandable(self, pool: str, size: int) -> Block | None:
        cand = self._find_expandable_block(pool, size)
        if not cand.mapped and not self._map(cand, min(cand.size, size)):
            return None
        while cand.size < size:
            nxt = cand.next
            if not self._map(nxt, min(size - cand.size, nxt.size)):
                return None
            cand = nxt
        self.free_blocks[pool].discard(cand)
        return cand

    def _find_expandable_block(self, pool: str, size: int) -> Block:
        def allocatable(b):
            return b is not None and not b.allocated

        for c in sorted(self.unmapped[pool], key=lambda b: b.ptr):
            if allocatable(c.prev):
                c = c.prev
            room, b = 0, c
            while room < size and allocatable(b):
                room, b = room + b.size, b.next
            if room >= size:
                return c
        page = SMALL_BUFFER if pool == "small" else LARGE_BUFFER
        seg = Segment(self._next_base, self.address_space, pool, expandable=True, page=page)
        self._next_base += self.address_space
        seg.head = Block(seg, seg.base, seg.size, mapped=False)
        self.segments.append(seg)
        self.unmapped[pool].add(seg.head)
        return seg.head

    def _map(self, block: Block, nbytes: int) -> bool:
        page = block.seg.page
        off = block.ptr - block.seg.base
        assert off % page == 0 and not block.mapped
        mapped = page * (-(-(off + nbytes) // page)) - off
        if self.stats()["reserved_bytes"] + mapped > self.capacity:
            return False
        self.unmapped[block.seg.pool].discard(block)
        block.mapped = True
        if mapped < block.size:
            rest = Block(block.seg, block.ptr + mapped, block.size - mapped, mapped=False,
                         prev=block, next=block.next)
            if block.next:
                block.next.prev = rest
            block.next, block.size = rest, mapped
            self.unmapped[block.seg.pool].add(rest)
        self._try_merge(block, block.prev)
        self._try_merge(block, block.next)
        self.free_blocks[block.seg.pool].add(block)
        self.num_device_alloc += 1
        return True

    def _unmap(self, block: Block) -> None:
        seg, page = block.seg, block.seg.page
        lo = -(-(block.ptr - seg.base) // page) * page + seg.base          # first whole page
        hi = (block.ptr + block.size - seg.base) // page * page + seg.base  # end of the last
        if lo >= hi:
            return
        pool = seg.pool
        self.free_blocks[pool].discard(block)
        if lo > block.ptr:
            before = Block(seg, block.ptr, lo - block.ptr, prev=block.prev, next=block)
            if block.prev:
                block.prev.next = before
            elif seg.head is block:
                seg.head = before
            block.prev = before
            self.free_blocks[pool].add(before)
        if block.ptr + block.size > hi:
            after = Block(seg, hi, block.ptr + block.size - hi, prev=block, next=block.next)
            if block.next:
                block.next.prev = after
            block.next = after
            self.free_blocks[pool].add(after)
        block.ptr, block.size, block.mapped = lo, hi - lo, False
        self._try_merge(block, block.prev)
        self._try_merge(block, block.next)
        self.unmapped[pool].add(block)
        self.num_device_free += 1
        if not block.is_split():                 # nothing of the segment is mapped any more
            self.unmapped[pool].discard(block)
            self.segments.remove(seg)

    # ---- what torch.cuda.memory_stats() and memory_snapshot() report
    def blocks(self, seg: Segment):
        b = seg.head
        while b is not None:
            yield b
            b = b.next

    def stats(self) -> dict:
        st = {"allocated_bytes": 0, "reserved_bytes": 0, "requested_bytes": 0, "active_bytes": 0,
              "segments": 0, "inactive_split_bytes": 0,
              "small_pool_reserved_bytes": 0, "large_pool_reserved_bytes": 0}
        for seg in self.segments:
            mapped = sum(b.size for b in self.blocks(seg) if b.mapped)
            st["reserved_bytes"] += mapped
            st[f"{seg.pool}_pool_reserved_bytes"] += mapped
            if not seg.expandable:
                st["segments"] += 1
            for b in self.blocks(seg):
                if b.allocated:
                    st["allocated_bytes"] += b.size
                    st["active_bytes"] += b.size
                    st["requested_bytes"] += b.requested
                elif b.mapped and b.is_split() and not seg.expandable:
                    st["inactive_split_bytes"] += b.size
        return st

    def snapshot(self) -> list[dict]:
        """Segments as memory_snapshot() lists them (mapped blocks only)."""
        out = []
        for seg in sorted(self.segments, key=lambda s: s.base):
            blocks = [{"size": b.size, "state": "active_allocated" if b.allocated else "inactive"}
                      for b in self.blocks(seg) if b.mapped]
            out.append({"segment_type": seg.pool, "total_size": sum(b["size"] for b in blocks),
                        "allocated_size": sum(b["size"] for b in blocks if b["state"] != "inactive"),
                        "blocks": blocks})
        return out


# --8<-- [start:replay]
def replay(trace, **settings) -> tuple[list[dict], dict]:
    """Run an alloc/free trace (the format of bench/experiments/caching_allocator.py) through the model.

    Returns the stats after every step and a summary at each ("snapshot", label) step."""
    model = CachingAllocatorModel(**settings)
    live, steps, snaps = {}, [], {}
    for op in trace:
        if op[0] == "alloc":
            live[op[1]] = model.malloc(op[2])
        elif op[0] == "free":
            model.free(live.pop(op[1]))
        elif op[0] == "empty_cache":
            model.empty_cache()
        elif op[0] == "snapshot":
            snaps[op[1]] = summarize(model.snapshot())
        steps.append(model.stats())
    return steps, snaps
# --8<-- [end:replay]


def summarize(segments: list[dict]) -> dict:
    free = [b["size"] for s in segments for b in s["blocks"] if b["state"] == "inactive"]
    return {"segments": len(segments),
            "segment_sizes_bytes": sorted(s["total_size"] for s in segments),
            "free_blocks_bytes": sorted(free),
            "largest_free_block_bytes": max(free, default=0),
            "reserved_bytes": sum(s["total_size"] for s in segments),
            "allocated_bytes": sum(s["allocated_size"] for s in segments)}

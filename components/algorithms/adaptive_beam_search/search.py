"""Best-first graph search with a pluggable stop rule: fixed beam width or Adaptive Beam Search.

Inner loop: numba (``@njit(cache=True)``), not vectorised numpy. The loop is inherently
sequential (pop the closest candidate, test the stop rule, expand its 16-32 neighbours); batching
the neighbour distances with numpy still leaves a Python-level heap per step (~50x slower, see the
spec sheet), while numba compiles the heap, the visited stamps and the distance loop together and
runs thousands of queries per second per configuration. numba is already a dependency (pydata
``sparse`` needs it), so it adds nothing to install.

Stop rules (x = candidate just popped, d_(j) = j-th smallest distance among all discovered nodes,
x itself included):
- ``beam``, width b >= k: stop when d(q, x) > d_(b)  (HNSW's ``ef`` rule, strict as in faiss: a
  candidate tied with the b-th best is still expanded; with ">=" the entry point would stop greedy
  search before its first expansion, since it is its own k-th best when k = 1);
- ``adaptive``, slack gamma >= 0: stop when d(q, x) > (1 + gamma) * d_(k)  (ABS);
- ``greedy``: adaptive with gamma = 0 (= beam with b = k).
Every rule counts distance computations the same way: one per node discovered at level 0 (its
distance is computed when it is first seen) plus every distance of the upper-level descent.

Cost (profiled against faiss's HNSW search, same graph, 1 thread): the kernel works on squared L2
in float32 with a SIMD-vectorised loop (``fastmath``; the rules compare d^2 with (1 + gamma)^2 d_(k)^2,
the same order), pushes a discovered node into the candidate heap only if the stop rule could ever
expand it (the result set is full and it lies beyond (1 + gamma) x its worst: it would end the search
when popped, so leaving it out changes neither the answer nor the count), and reuses one visited-stamp
array per graph across calls (no O(n) reset or allocation per query: the Ray Serve path searches one
query per call).
"""
from __future__ import annotations

import numpy as np
from numba import njit

RULE_BEAM = 0
RULE_ADAPTIVE = 1


@njit(cache=True, fastmath={"reassoc", "contract"})
def _sqdist(X, i, q):
    """Squared L2 between row i of X and q, accumulated in float32; reassociation lets LLVM vectorise the
    sum like faiss's kernel. Not inlined at numba-IR level: that would drop these flags (the caller has none)."""
    s = np.float32(0.0)
    for t in range(q.shape[0]):
        v = X[i, t] - q[t]
        s += v * v
    return s


@njit(cache=True, inline="always")
def _minheap_push(hd, hi, size, d, i):
    j = size
    hd[j] = d
    hi[j] = i
    while j > 0:
        p = (j - 1) >> 1
        if hd[p] <= hd[j]:
            break
        hd[p], hd[j] = hd[j], hd[p]
        hi[p], hi[j] = hi[j], hi[p]
        j = p
    return size + 1


@njit(cache=True, inline="always")
def _siftdown(hd, hi, size, sign):
    """Restore the heap property from the root; sign=1 min-heap, sign=-1 max-heap."""
    j = 0
    while True:
        l = 2 * j + 1
        if l >= size:
            break
        c = l
        r = l + 1
        if r < size and sign * hd[r] < sign * hd[l]:
            c = r
        if sign * hd[j] <= sign * hd[c]:
            break
        hd[c], hd[j] = hd[j], hd[c]
        hi[c], hi[j] = hi[j], hi[c]
        j = c


@njit(cache=True, inline="always")
def _maxheap_push(hd, hi, size, d, i):
    j = size
    hd[j] = d
    hi[j] = i
    while j > 0:
        p = (j - 1) >> 1
        if hd[p] >= hd[j]:
            break
        hd[p], hd[j] = hd[j], hd[p]
        hi[p], hi[j] = hi[j], hi[p]
        j = p
    return size + 1


@njit(cache=True)
def descend(X, upper, entry, q):
    """Greedy descent through the upper levels (top first), as faiss does. Returns (node, squared dist, count)."""
    cur = entry
    dcur = _sqdist(X, cur, q)
    nd = 1
    for lev in range(upper.shape[0] - 1, -1, -1):
        changed = True
        while changed:
            changed = False
            prev = cur
            for j in range(upper.shape[2]):
                y = upper[lev, prev, j]
                if y < 0:
                    break
                dy = _sqdist(X, y, q)
                nd += 1
                if dy < dcur:
                    dcur = dy
                    cur = y
                    changed = True
    return cur, dcur, nd


@njit(cache=True)
def search_batch_kernel(X, adj, upper, entry, Q, k, rule, width, gamma, out_ids, out_dist, out_ndist, visited,
                        stamp0):
    """Search every row of Q; writes ids/distances (k best of the discovered set) and distance counts.

    ``visited`` (int32, n) holds stamps: query i of this call marks with ``stamp0 + i + 1``; the caller
    keeps the array and passes the next ``stamp0`` (returned), so nothing is reset per query or call."""
    n = X.shape[0]
    m = width if rule == RULE_BEAM else k
    cd = np.empty(n + 1, np.float32)
    ci = np.empty(n + 1, np.int32)
    rd = np.empty(m + 1, np.float32)
    ri = np.empty(m + 1, np.int32)
    slack = np.float32(1.0 + gamma)
    slack2 = slack * slack if rule == RULE_ADAPTIVE else np.float32(1.0)
    for qi in range(Q.shape[0]):
        q = Q[qi]
        stamp = stamp0 + qi + 1
        start, dstart, nd = descend(X, upper, entry, q)
        visited[start] = stamp
        cs = _minheap_push(cd, ci, 0, np.float32(dstart), start)
        rs = _maxheap_push(rd, ri, 0, np.float32(dstart), start)
        while cs > 0:
            dx = cd[0]
            x = ci[0]
            cs -= 1
            cd[0] = cd[cs]
            ci[0] = ci[cs]
            _siftdown(cd, ci, cs, 1)
            # beam: m = width, slack2 = 1; adaptive: m = k, slack2 = (1 + gamma)^2 (squared distances)
            if rs >= m and dx > slack2 * rd[0]:
                break
            for j in range(adj.shape[1]):
                y = adj[x, j]
                if y < 0:
                    break
                if visited[y] == stamp:
                    continue
                visited[y] = stamp
                dy = _sqdist(X, y, q)
                nd += 1
                if rs < m:
                    rs = _maxheap_push(rd, ri, rs, dy, y)
                elif dy < rd[0]:
                    rd[0] = dy
                    ri[0] = y
                    _siftdown(rd, ri, rs, -1)
                # rd[0] only falls once the result set is full, so a node beyond the bound now would stop
                # the search when popped: it is never expanded and need not enter the heap
                if rs < m or dy <= slack2 * rd[0]:
                    cs = _minheap_push(cd, ci, cs, dy, y)
        order = np.argsort(rd[:rs], kind="mergesort")
        for t in range(k):
            if t < rs:
                out_ids[qi, t] = ri[order[t]]
                out_dist[qi, t] = np.sqrt(rd[order[t]])
            else:
                out_ids[qi, t] = -1
                out_dist[qi, t] = np.inf
        out_ndist[qi] = nd
    return stamp0 + Q.shape[0]

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
"""
from __future__ import annotations

import numpy as np
from numba import njit

RULE_BEAM = 0
RULE_ADAPTIVE = 1


@njit(cache=True, inline="always")
def _dist(X, i, q):
    s = 0.0
    for t in range(q.shape[0]):
        v = X[i, t] - q[t]
        s += v * v
    return np.sqrt(s)


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
    """Greedy descent through the upper levels (top first), as faiss does. Returns (node, dist, count)."""
    cur = entry
    dcur = _dist(X, cur, q)
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
                dy = _dist(X, y, q)
                nd += 1
                if dy < dcur:
                    dcur = dy
                    cur = y
                    changed = True
    return cur, dcur, nd


@njit(cache=True)
def search_batch_kernel(X, adj, upper, entry, Q, k, rule, width, gamma, out_ids, out_dist, out_ndist):
    """Search every row of Q; writes ids/distances (k best of the discovered set) and distance counts."""
    n = X.shape[0]
    m = width if rule == RULE_BEAM else k
    visited = np.zeros(n, np.int32)
    cd = np.empty(n + 1, np.float32)
    ci = np.empty(n + 1, np.int32)
    rd = np.empty(m + 1, np.float32)
    ri = np.empty(m + 1, np.int32)
    slack = np.float32(1.0 + gamma)
    for qi in range(Q.shape[0]):
        q = Q[qi]
        stamp = qi + 1
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
            if rule == RULE_BEAM:
                if rs >= width and dx > rd[0]:
                    break
            else:
                if rs >= k and dx > slack * rd[0]:
                    break
            for j in range(adj.shape[1]):
                y = adj[x, j]
                if y < 0:
                    break
                if visited[y] == stamp:
                    continue
                visited[y] = stamp
                dy = np.float32(_dist(X, y, q))
                nd += 1
                cs = _minheap_push(cd, ci, cs, dy, y)
                if rs < m:
                    rs = _maxheap_push(rd, ri, rs, dy, y)
                elif dy < rd[0]:
                    rd[0] = dy
                    ri[0] = y
                    _siftdown(rd, ri, rs, -1)
        order = np.argsort(rd[:rs], kind="mergesort")
        for t in range(k):
            if t < rs:
                out_ids[qi, t] = ri[order[t]]
                out_dist[qi, t] = rd[order[t]]
            else:
                out_ids[qi, t] = -1
                out_dist[qi, t] = np.inf
        out_ndist[qi] = nd

"""The GEMM mainloops, written once. Each computes fp32 `acc = A @ B` for output tiles and hands
each finished tile to the generated `epilogue` function; nothing here knows what it computes.

`{KERNEL}` stands for the kernel's name (`coda_gemm_<program>` or `coda_map_<program>`: what
profilers show), `{EPILOGUE_PARAMS}` for the epilogue's operand/output parameters, `{EPILOGUE_ARGS}` for
what the mainloop passes on, and `{PROLOGUE}` for the lines that make the epilogue's TMA
descriptors (codegen/epilogue.py). EPILOGUE_N is the width of the tile the epilogue sees.

- `portable`: one program per output tile, pointer loads with masks on K, grouped tile order
  (GROUP_M row blocks share B columns in L2). Runs on any GPU Triton supports and under the
  Triton interpreter.
- `map`: no GEMM at all; the epilogue's input is a tile of an existing tensor (`Program.map`).
- `hopper` (sm_90): persistent (one program per SM walking the tiles in grouped order), A and B
  read through device-side TMA tensor descriptors (zero-filled out of bounds, so no masks), the
  tile loop flattened with the K loop so the next tile's loads overlap this tile's epilogue, and
  the epilogue optionally run on two or four column slices of the tile to cut its register
  footprint.
- `pingpong` (sm_90, Gluon): persistent and warp-specialized. A loader warp fills a ring of
  (A, B) tiles by TMA; two MMA warpgroups take alternate tiles and pass the tensor cores back and
  forth, so each tile's epilogue runs under the other warpgroup's K loop. Its program-specific
  pieces are `{PROLOGUE}` (descriptors and shared-memory buffers of the epilogue's TMA tiles),
  `{PARTITION_ARGS}` (what an MMA warpgroup receives), `{SLICE_ARGS}` (what it passes to the
  epilogue for column slice `j`), `{PREFETCH}`, `{TILES_WAIT}` and `{TILES_FREE}` (the TMA
  loads of the epilogue's tile operands at the tile's start, the wait for them, and, where the
  warpgroups share the operands' buffers, their release to `{OPERAND_PARTITION}`, a warp that
  fetches them instead, `{OPERAND_WORKER}` in the partition list): `epilogue.pingpong_parts`.
"""

PORTABLE = '''
@triton.jit(do_not_specialize=["seed"])
def {KERNEL}(A, B, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, A1, A2, A3, CUT1, CUT2, CUT3,
              M_LIMIT, K_LIMIT, A_SUMS, seed{EPILOGUE_PARAMS},
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              GROUP_M: tl.constexpr, A_PIECES: tl.constexpr, A_CONCAT_K: tl.constexpr,
              LIMIT_M: tl.constexpr, LIMIT_K: tl.constexpr, SUM_A: tl.constexpr,
              DOT_PRECISION: tl.constexpr):
    M, K = limited(M, K, M_LIMIT, K_LIMIT, LIMIT_M, LIMIT_K)
    pid = tl.program_id(0)
    row_blocks = tl.cdiv(M, BLOCK_M)
    col_blocks = tl.cdiv(N, BLOCK_N)
    if pid >= row_blocks * col_blocks:   # past a limit on M
        return
    # Grouped order: GROUP_M consecutive programs walk down a column of row blocks.
    group_size = GROUP_M * col_blocks
    first_row_block = (pid // group_size) * GROUP_M
    rows_in_group = min(row_blocks - first_row_block, GROUP_M)
    pid_m = first_row_block + (pid % group_size) % rows_in_group
    pid_n = (pid % group_size) // rows_in_group

    # Rows and columns past the edge wrap around (their results are never stored).
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # A is one tensor, or A_PIECES joined along K or M (a Concat): piece i spans [start, end)
    # of that axis. Along K each piece is a K loop of its own; along M the tile's rows lie in one
    # piece (the launcher checks that BLOCK_M divides the pieces), whose K loop alone runs.
    starts, ends = piece_bounds(CUT1, CUT2, CUT3, K if A_CONCAT_K else M)
    for i in tl.static_range(A_PIECES):
        start, end = starts[i], ends[i]
        if A_CONCAT_K:
            rows, k_first, k_len, k_blocks = offs_m, start, end - start, tl.cdiv(end - start, BLOCK_K)
        else:   # rows past M (never stored) are clamped into the piece
            row0 = pid_m * BLOCK_M
            rows = tl.minimum(row0 - start + tl.arange(0, BLOCK_M), end - start - 1)
            k_first, k_len = 0, K
            k_blocks = tl.where((row0 >= start) & (row0 < end), tl.cdiv(K, BLOCK_K), 0)
        a_ptrs = (A, A1, A2, A3)[i] + rows[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = B + (k_first + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn
        for k in range(0, k_blocks):
            k_left = k_len - k * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            # The tiles of a row block also sum A's columns, K block by K block in turn (every
            # K block once, the work spread over the row block's tiles)
            if SUM_A:
                if (k_first // BLOCK_K + k) % col_blocks == pid_n:
                    if A_CONCAT_K:
                        a_column_sums((A, A1, A2, A3)[i], stride_am, stride_ak, pid_m * BLOCK_M, M,
                                      k * BLOCK_K, k_len, A_SUMS, pid_m, k_first + k * BLOCK_K, K,
                                      BLOCK_M, BLOCK_K)
                    else:
                        a_column_sums((A, A1, A2, A3)[i], stride_am, stride_ak, pid_m * BLOCK_M - start,
                                      end - start, k * BLOCK_K, K, A_SUMS, pid_m, k * BLOCK_K, K,
                                      BLOCK_M, BLOCK_K)
            # (float32 operands: DOT_PRECISION is "tf32" or "tf32x3", Plan.__init__)
            acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
    epilogue(acc, pid_m, pid_n, M, N, seed{EPILOGUE_ARGS}, BLOCK_M, BLOCK_N)
'''

TILE_HELPERS = '''
@triton.jit
def column_halves(tile, ROWS: tl.constexpr, COLS: tl.constexpr):
    return tl.split(tl.permute(tl.reshape(tile, (ROWS, 2, COLS // 2)), (0, 2, 1)))


@triton.jit
def tile_coords(tile_id, row_blocks, col_blocks, GROUP_M: tl.constexpr):
    group_size = GROUP_M * col_blocks
    first_row_block = (tile_id // group_size) * GROUP_M
    rows_in_group = min(row_blocks - first_row_block, GROUP_M)
    pid_m = first_row_block + (tile_id % group_size) % rows_in_group
    pid_n = (tile_id % group_size) // rows_in_group
    return pid_m, pid_n


@triton.jit
def limited(M, K, M_LIMIT, K_LIMIT, LIMIT_M: tl.constexpr, LIMIT_K: tl.constexpr):
    # M and K lowered to the limits read from the device (`m_limit=`, `k_limit=`): the tile
    # count, the TMA descriptors' extents (zero past them) and the epilogue's masks follow
    if LIMIT_M:
        M = cm.limited(M, M_LIMIT)
    if LIMIT_K:
        K = cm.limited(K, K_LIMIT)
    return M, K


@triton.jit
def a_column_sums(X, stride_am, stride_ak, row0, rows_end, k0, k_end, A_SUMS, pid_m, k_out, K,
                  BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    # `a_col_sums=True`: the column sums of the tile of A's piece X (A itself, or one piece of a
    # Concat) with rows row0.. below rows_end and columns k0.. below k_end, into row pid_m of the
    # [row blocks, K] partials from column k_out on. The tile is read again through pointers
    # (from L2: the K loop has just loaded it), so that the MMA's operand has no second reader
    # (one changed how Triton pipelines the persistent kernel's loads, and its results).
    # (in slices of 32 rows, beside the persistent kernel's 128 x 256 accumulator)
    cols = k0 + tl.arange(0, BLOCK_K)
    sums = tl.zeros([BLOCK_K], dtype=tl.float32)
    for r in tl.static_range(0, BLOCK_M, 32):
        rows = row0 + r + tl.arange(0, 32)
        tile = tl.load(X + rows[:, None] * stride_am + cols[None, :] * stride_ak,
                       mask=(rows < rows_end)[:, None] & (cols < k_end)[None, :], other=0.0)
        sums += tl.sum(tile.to(tl.float32), axis=0)
    tl.store(A_SUMS + pid_m * K + k_out + tl.arange(0, BLOCK_K), sums, mask=cols < k_end)


@triton.jit
def piece_bounds(CUT1, CUT2, CUT3, TOTAL):
    # (starts, ends) of the up to four pieces of a Concat A along its joined axis; the launcher
    # pads the cuts past the last piece with the axis's length, and a limit (`limited`) may
    # have lowered TOTAL below some of them
    CUT1, CUT2, CUT3 = tl.minimum(CUT1, TOTAL), tl.minimum(CUT2, TOTAL), tl.minimum(CUT3, TOTAL)
    return (0, CUT1, CUT2, CUT3), (CUT1, CUT2, CUT3, TOTAL)
'''

HOPPER_PIECES = '''
@triton.jit
def piece_descriptors(A, A1, A2, A3, starts, ends, M, K, stride_am, stride_ak,
                      BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, A_PIECES: tl.constexpr,
                      A_CONCAT_K: tl.constexpr, A_K_CONTIGUOUS: tl.constexpr):
    # one TMA descriptor per piece of a Concat A, each spanning its own extent of the joined axis
    descs = ()
    for i in tl.static_range(A_PIECES):
        rows = M if A_CONCAT_K else ends[i] - starts[i]
        depth = ends[i] - starts[i] if A_CONCAT_K else K
        if A_K_CONTIGUOUS:
            desc = tl.make_tensor_descriptor((A, A1, A2, A3)[i], shape=[rows, depth], strides=[stride_am, 1],
                                             block_shape=[BLOCK_M, BLOCK_K])
        else:
            desc = tl.make_tensor_descriptor((A, A1, A2, A3)[i], shape=[depth, rows], strides=[stride_ak, 1],
                                             block_shape=[BLOCK_K, BLOCK_M])
        descs += (desc,)
    return descs


@triton.jit
def k_block_operands(a_desc, b_desc, row, col, a_k, b_k, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, A_K_CONTIGUOUS: tl.constexpr, B_N_CONTIGUOUS: tl.constexpr):
    # A's [BLOCK_M, BLOCK_K] tile at (row, a_k) and B's [BLOCK_K, BLOCK_N] tile at (b_k, col), read
    # through their descriptors as they lie (transposed views where a buffer is)
    if A_K_CONTIGUOUS:
        a = a_desc.load([row, a_k])
    else:
        a = a_desc.load([a_k, row]).T
    if B_N_CONTIGUOUS:
        b = b_desc.load([b_k, col])
    else:
        b = b_desc.load([col, b_k]).T
    return a, b


@triton.jit
def pieces_product(a_descs, b_desc, starts, ends, pid_m, pid_n, col_blocks, M, K, a_pieces, stride_am,
                   stride_ak, A_SUMS, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   A_PIECES: tl.constexpr, A_CONCAT_K: tl.constexpr, A_K_CONTIGUOUS: tl.constexpr,
                   B_N_CONTIGUOUS: tl.constexpr, SUM_A: tl.constexpr):
    # A @ B for one tile of a Concat A: along K one pipelined K loop per piece (past a piece's
    # end its descriptor reads zeros, so B's rows there add nothing); along M only the loop of
    # the tile's own piece runs (the others have no trips)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    row0 = pid_m * BLOCK_M
    for i in tl.static_range(A_PIECES):
        if A_CONCAT_K:
            row, rows_end, k_first, k_len = row0, M, starts[i], ends[i] - starts[i]
            k_blocks = tl.cdiv(ends[i] - starts[i], BLOCK_K)
        else:
            row, rows_end, k_first, k_len = row0 - starts[i], ends[i] - starts[i], 0, K
            k_blocks = tl.where((row0 >= starts[i]) & (row0 < ends[i]), tl.cdiv(K, BLOCK_K), 0)
        for kb in range(k_blocks):
            a, b = k_block_operands(a_descs[i], b_desc, row, pid_n * BLOCK_N, kb * BLOCK_K,
                                    k_first + kb * BLOCK_K, BLOCK_M, BLOCK_N, BLOCK_K, A_K_CONTIGUOUS,
                                    B_N_CONTIGUOUS)
            if SUM_A:   # each K block by one tile of the row block, in turn
                if (k_first // BLOCK_K + kb) % col_blocks == pid_n:
                    a_column_sums(a_pieces[i], stride_am, stride_ak, row, rows_end, kb * BLOCK_K, k_len,
                                  A_SUMS, pid_m, k_first + kb * BLOCK_K, K, BLOCK_M, BLOCK_K)
            acc = tl.dot(a, b, acc)
    return acc
'''

HOPPER = '''
@triton.jit
def tile_epilogue(acc, pid_m, pid_n, M, N, seed{EPILOGUE_ARGS}, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, EPILOGUE_SPLIT: tl.constexpr):
    # The epilogue sees EPILOGUE_SPLIT column slices of the tile, one after the other, so its
    # temporaries (loads, RNG state) need a half or a quarter of the registers. In the last
    # tile of a ragged N a slice can lie wholly past N: the epilogue's masks then store
    # nothing (no `if` here: Triton's loop flattening cannot take one).
    if EPILOGUE_SPLIT == 1:
        epilogue(acc, pid_m, pid_n, M, N, seed{EPILOGUE_ARGS}, BLOCK_M, BLOCK_N)
    else:
        left, right = column_halves(acc, BLOCK_M, BLOCK_N)
        if EPILOGUE_SPLIT == 2:
            epilogue(left, pid_m, 2 * pid_n, M, N, seed{EPILOGUE_ARGS}, BLOCK_M, BLOCK_N // 2)
            epilogue(right, pid_m, 2 * pid_n + 1, M, N, seed{EPILOGUE_ARGS}, BLOCK_M, BLOCK_N // 2)
        else:
            q0, q1 = column_halves(left, BLOCK_M, BLOCK_N // 2)
            q2, q3 = column_halves(right, BLOCK_M, BLOCK_N // 2)
            epilogue(q0, pid_m, 4 * pid_n, M, N, seed{EPILOGUE_ARGS}, BLOCK_M, BLOCK_N // 4)
            epilogue(q1, pid_m, 4 * pid_n + 1, M, N, seed{EPILOGUE_ARGS}, BLOCK_M, BLOCK_N // 4)
            epilogue(q2, pid_m, 4 * pid_n + 2, M, N, seed{EPILOGUE_ARGS}, BLOCK_M, BLOCK_N // 4)
            epilogue(q3, pid_m, 4 * pid_n + 3, M, N, seed{EPILOGUE_ARGS}, BLOCK_M, BLOCK_N // 4)


@triton.jit(do_not_specialize=["seed"])
def {KERNEL}(A, B, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, A1, A2, A3, CUT1, CUT2, CUT3,
              M_LIMIT, K_LIMIT, A_SUMS, PARTIALS, READY, seed{EPILOGUE_PARAMS},
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, A_K_CONTIGUOUS: tl.constexpr,
              B_N_CONTIGUOUS: tl.constexpr, EPILOGUE_SPLIT: tl.constexpr, FLATTEN: tl.constexpr,
              EPILOGUE_N: tl.constexpr, A_PIECES: tl.constexpr, A_CONCAT_K: tl.constexpr,
              LIMIT_M: tl.constexpr, LIMIT_K: tl.constexpr, SUM_A: tl.constexpr, STREAM_K: tl.constexpr):
    M, K = limited(M, K, M_LIMIT, K_LIMIT, LIMIT_M, LIMIT_K)
    # A is [M, K] with K contiguous, or its transpose is: describe whichever is row-major (each
    # piece of a Concat A: `piece_descriptors`; such a launch does not flatten its loops).
    starts, ends = piece_bounds(CUT1, CUT2, CUT3, K if A_CONCAT_K else M)
    if A_PIECES > 1:
        a_descs = piece_descriptors(A, A1, A2, A3, starts, ends, M, K, stride_am, stride_ak, BLOCK_M,
                                    BLOCK_K, A_PIECES, A_CONCAT_K, A_K_CONTIGUOUS)
    elif A_K_CONTIGUOUS:
        a_desc = tl.make_tensor_descriptor(A, shape=[M, K], strides=[stride_am, 1],
                                           block_shape=[BLOCK_M, BLOCK_K])
    else:
        a_desc = tl.make_tensor_descriptor(A, shape=[K, M], strides=[stride_ak, 1],
                                           block_shape=[BLOCK_K, BLOCK_M])
    # B is [K, N] with N contiguous, or (an nn.Linear weight used as W.T) [N, K] with K contiguous.
    if B_N_CONTIGUOUS:
        b_desc = tl.make_tensor_descriptor(B, shape=[K, N], strides=[stride_bk, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
    else:
        b_desc = tl.make_tensor_descriptor(B, shape=[N, K], strides=[stride_bn, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
{PROLOGUE}
    row_blocks = tl.cdiv(M, BLOCK_M)
    col_blocks = tl.cdiv(N, BLOCK_N)
    k_blocks = tl.cdiv(K, BLOCK_K)
    if STREAM_K:
        # Stream-K (few tiles, long K: a weight gradient): every tile's K blocks, laid end to
        # end, are cut into NUM_SMS runs of equal length, one a program, so no SM idles in a
        # last wave. A run's first stretch may be the end of a tile that an earlier run began:
        # it leaves its float32 partial in PARTIALS (one slot a run) and raises its READY
        # flag. The run that holds a tile's first K block adds the later runs' partials to its
        # own, in run order (the same sum whatever finishes first), runs the epilogue and lowers
        # the flags again. Those partials are the later runs' first stretches, done early, so
        # it seldom waits. Programs take the runs from the last: the interpreter, which runs
        # the programs one after another, then meets every partial written before it is read.
        run = NUM_SMS - 1 - tl.program_id(0)
        total = row_blocks * col_blocks * k_blocks
        it = (run * total) // NUM_SMS
        run_end = ((run + 1) * total) // NUM_SMS
        slot = PARTIALS + run * (BLOCK_M * BLOCK_N)
        offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        while it < run_end:
            tile_id = it // k_blocks
            kb_first = it - tile_id * k_blocks
            kb_end = tl.minimum(k_blocks, kb_first + run_end - it)
            pid_m, pid_n = tile_coords(tile_id, row_blocks, col_blocks, GROUP_M)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for kb in range(kb_first, kb_end):
                a, b = k_block_operands(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, kb * BLOCK_K,
                                        kb * BLOCK_K, BLOCK_M, BLOCK_N, BLOCK_K, A_K_CONTIGUOUS,
                                        B_N_CONTIGUOUS)
                acc = tl.dot(a, b, acc)
            if kb_first > 0:   # the end of a tile begun by an earlier run
                tl.store(slot + offs, acc)
                tl.debug_barrier()   # every thread's part stored before the flag says so
                tl.atomic_xchg(READY + run, 1, sem="release")
            else:
                later, kb_done = run + 1, kb_end
                while kb_done < k_blocks:
                    while tl.atomic_add(READY + later, 0, sem="acquire") == 0:
                        pass
                    acc += tl.load(PARTIALS + later * (BLOCK_M * BLOCK_N) + offs, cache_modifier=".cg")
                    tl.atomic_xchg(READY + later, 0, sem="relaxed")
                    kb_done = tl.minimum(k_blocks, ((later + 1) * total) // NUM_SMS - tile_id * k_blocks)
                    later += 1
                tile_epilogue(acc, pid_m, pid_n, M, N, seed{EPILOGUE_ARGS}, BLOCK_M, BLOCK_N, EPILOGUE_SPLIT)
            it += kb_end - kb_first
    else:
        # The epilogue recomputes its tile's coordinates from its own counter, so the flattened
        # loop carries no dependency from the K loop's tile index into the epilogue.
        epilogue_tile = tl.program_id(0) - NUM_SMS
        for tile_id in tl.range(tl.program_id(0), row_blocks * col_blocks, NUM_SMS, flatten=FLATTEN):
            pid_m, pid_n = tile_coords(tile_id, row_blocks, col_blocks, GROUP_M)
            if A_PIECES > 1:
                acc = pieces_product(a_descs, b_desc, starts, ends, pid_m, pid_n, col_blocks, M, K,
                                     (A, A1, A2, A3), stride_am, stride_ak, A_SUMS, BLOCK_M, BLOCK_N, BLOCK_K,
                                     A_PIECES, A_CONCAT_K, A_K_CONTIGUOUS, B_N_CONTIGUOUS, SUM_A)
            else:
                acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for kb in range(k_blocks):
                    a, b = k_block_operands(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, kb * BLOCK_K,
                                            kb * BLOCK_K, BLOCK_M, BLOCK_N, BLOCK_K, A_K_CONTIGUOUS,
                                            B_N_CONTIGUOUS)
                    if SUM_A:   # each K block by one tile of the row block, in turn
                        if kb % col_blocks == pid_n:
                            a_column_sums(A, stride_am, stride_ak, pid_m * BLOCK_M, M, kb * BLOCK_K, K,
                                          A_SUMS, pid_m, kb * BLOCK_K, K, BLOCK_M, BLOCK_K)
                    acc = tl.dot(a, b, acc)
            epilogue_tile += NUM_SMS
            pid_m, pid_n = tile_coords(epilogue_tile, row_blocks, col_blocks, GROUP_M)
            tile_epilogue(acc, pid_m, pid_n, M, N, seed{EPILOGUE_ARGS}, BLOCK_M, BLOCK_N, EPILOGUE_SPLIT)
'''

PINGPONG = '''
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                              warpgroup_mma, warpgroup_mma_wait)


@gluon.constexpr_function
def smem_layout(rows, cols, dtype):
    # the widest swizzle a [rows, cols] tile allows (what TMA and wgmma read fastest)
    return gl.NVMMASharedLayout.get_default_for([rows, cols], dtype)


@gluon.constexpr_function
def column_swaps(layout, piece):
    # (lane column, register column, lane xor) for each column bit below `piece` that the lanes
    # of the linear `layout` hold, paired with a column bit of at least `piece` that registers hold
    # (none where the registers hold too few columns, a narrow slice: it is stored as it lies)
    regs = [b[1] for b in layout.reg_bases if b[0] == 0 and b[1] >= piece]
    lanes = [(b[1], 1 << i) for i, b in enumerate(layout.lane_bases) if b[0] == 0 and 0 < b[1] < piece]
    if len(lanes) > len(regs):
        return gl.constexpr(())
    return gl.constexpr(tuple((col, reg, xor) for (col, xor), reg in zip(lanes, regs)))


@gluon.constexpr_function
def wide_store_layout(layout, piece):
    # `layout` once its column bits below `piece` are all in registers, those first: each thread
    # holds `piece` adjacent columns in consecutive registers (one 16-byte store)
    # (`layout` itself where they cannot all be: see column_swaps)
    regs = [list(b) for b in layout.reg_bases]
    lanes = [list(b) for b in layout.lane_bases]
    for lane_col, reg_col, xor in column_swaps(layout, piece).value:
        i, j = lanes.index([0, lane_col]), regs.index([0, reg_col])
        regs[j], lanes[i] = lanes[i], regs[j]
    low = [[0, 1 << i] for i in range(piece.bit_length() - 1)]
    if any(b not in regs for b in low):
        return layout
    regs = low + [b for b in regs if b not in low]
    return gl.DistributedLinearLayout(regs, lanes, layout.warp_bases, layout.block_bases, layout.shape)


@gluon.jit
def swap_column_bits(v, LANE_COL: gl.constexpr, REG_COL: gl.constexpr, LANE_XOR: gl.constexpr):
    # v [R, W] in a layout where the lanes that differ by LANE_XOR hold columns LANE_COL apart
    # and each thread's registers hold columns REG_COL apart (REG_COL > LANE_COL, powers of two):
    # those two column bits trade places, by one butterfly shuffle of each 32-bit register pair.
    # Afterwards the lanes hold columns REG_COL apart and the registers columns LANE_COL apart.
    R: gl.constexpr = v.shape[0]
    W: gl.constexpr = v.shape[1]
    SPLIT_SHAPE: gl.constexpr = (R, W // (2 * REG_COL), 2, REG_COL // (2 * LANE_COL), 2, LANE_COL)
    # columns as (high, r, mid, l, low): r the register bit, l the lane bit; r0 and r1 the values
    # at r = 0 and r = 1, indexed by (row, high, mid, l, low)
    r0, r1 = v.reshape(SPLIT_SHAPE).permute(0, 1, 3, 4, 5, 2).split()
    cols = (gl.arange(0, W, layout=gl.SliceLayout(0, v.type.layout))[None, :]
            + gl.full(v.shape, 0, gl.int32, layout=v.type.layout))   # [R, W]: each value's column
    upper, _ = ((cols // LANE_COL) % 2).to(v.dtype).reshape(SPLIT_SHAPE).permute(0, 1, 3, 4, 5, 2).split()
    # a lane whose bit is 0 keeps r0 and sends r1, one whose bit is 1 keeps r1 and sends r0;
    # what arrives is the other register of the pair
    new0, new1 = gl.inline_asm_elementwise(
        "{ .reg .pred up; .reg .b32 out, in; setp.ne.b32 up, $4, 0; selp.b32 out, $2, $3, up; "
        f"shfl.sync.bfly.b32 in, out, {LANE_XOR}, 0x1f, 0xffffffff; "
        "selp.b32 $0, in, $2, up; selp.b32 $1, $3, in, up; }",
        "=r,=r,r,r,r", [r0, r1, upper], dtype=(v.dtype, v.dtype), is_pure=True,
        pack=32 // v.dtype.primitive_bitwidth)
    # (row, high, mid, r, low, l) -> columns (high, r, mid, l, low)
    return gl.join(new0, new1).permute(0, 1, 3, 2, 5, 4).reshape(R, W)


@gluon.jit
def store_wide(ptrs_base, stride, row0, col0, value, M, col_end):
    # value [ROWS, COLS] (a slice of the wgmma accumulator, or of its column pairs) stored at
    # ptrs_base + row * stride + col from (row0, col0), rows below M and columns below col_end,
    # from registers in 16-byte pieces: butterfly shuffles give each thread the adjacent columns
    # (Triton 3.6 makes that layout change through shared memory: docs/performance.md,
    # twenty-ninth session)
    piece: gl.constexpr = 128 // value.dtype.primitive_bitwidth
    source: gl.constexpr = gl.to_linear_layout(value.type.layout, value.shape)
    swaps: gl.constexpr = column_swaps(source, piece)
    wide = value
    for i in gl.static_range(len(swaps)):
        wide = swap_column_bits(wide, swaps[i][0], swaps[i][1], swaps[i][2])
    # the same placement, its registers in column order (no data moves)
    layout: gl.constexpr = wide_store_layout(source, piece)
    wide = gl.convert_layout(wide, layout)
    rows = row0 + gl.arange(0, value.shape[0], layout=gl.SliceLayout(1, layout))
    cols = col0 + gl.arange(0, value.shape[1], layout=gl.SliceLayout(0, layout))
    gl.store(ptrs_base + rows[:, None] * stride + cols[None, :], wide,
             mask=(rows < M)[:, None] & (cols < col_end)[None, :])


@gluon.jit
def operand_ring(X, ROWS, COLS, stride, BLOCK_ROWS: gl.constexpr, BLOCK_COLS: gl.constexpr,
                 STAGES: gl.constexpr):
    # the TMA descriptor of the row-major [ROWS, COLS] tensor at X, and a ring of STAGES tiles
    layout: gl.constexpr = smem_layout(BLOCK_ROWS, BLOCK_COLS, X.dtype.element_ty)
    desc = tma.make_tensor_descriptor(X, [ROWS, COLS], [stride, 1], [BLOCK_ROWS, BLOCK_COLS], layout)
    ring = gl.allocate_shared_memory(X.dtype.element_ty, [STAGES, BLOCK_ROWS, BLOCK_COLS], layout)
    return desc, ring


@gluon.jit
def piece_rings(A, A1, A2, A3, starts, ends, M, K, stride_am, stride_ak, BLOCK_M: gl.constexpr,
                BLOCK_K: gl.constexpr, STAGES: gl.constexpr, A_PIECES: gl.constexpr,
                A_CONCAT_K: gl.constexpr, A_K_CONTIGUOUS: gl.constexpr):
    # one TMA descriptor per piece of A (a Concat's, or A itself), each spanning its own extent
    # of the joined axis, and the ring of STAGES A tiles they all fill
    if A_K_CONTIGUOUS:
        layout: gl.constexpr = smem_layout(BLOCK_M, BLOCK_K, A.dtype.element_ty)
        ring = gl.allocate_shared_memory(A.dtype.element_ty, [STAGES, BLOCK_M, BLOCK_K], layout)
    else:
        layout: gl.constexpr = smem_layout(BLOCK_K, BLOCK_M, A.dtype.element_ty)
        ring = gl.allocate_shared_memory(A.dtype.element_ty, [STAGES, BLOCK_K, BLOCK_M], layout)
    descs = ()
    for i in gl.static_range(A_PIECES):
        rows = M if A_CONCAT_K else ends[i] - starts[i]
        depth = ends[i] - starts[i] if A_CONCAT_K else K
        if A_K_CONTIGUOUS:
            desc = tma.make_tensor_descriptor((A, A1, A2, A3)[i], [rows, depth], [stride_am, 1],
                                              [BLOCK_M, BLOCK_K], layout)
        else:
            desc = tma.make_tensor_descriptor((A, A1, A2, A3)[i], [depth, rows], [stride_ak, 1],
                                              [BLOCK_K, BLOCK_M], layout)
        descs += (desc,)
    return descs, ring


@gluon.jit
def tile_k_blocks(starts, ends, K, BLOCK_K: gl.constexpr, A_PIECES: gl.constexpr,
                  A_CONCAT_K: gl.constexpr):
    # the K blocks of one tile: a K loop per piece along K (a piece's last block is zero past
    # its end), or the whole K loop of the tile's own piece along M
    k_blocks = gl.cdiv(K, BLOCK_K)
    if A_CONCAT_K:
        k_blocks = 0
        for i in gl.static_range(A_PIECES):
            k_blocks += gl.cdiv(ends[i] - starts[i], BLOCK_K)
    return k_blocks


@gluon.jit
def load_tile(desc, buffer, ready, row, k, K_CONTIGUOUS: gl.constexpr):
    # TMA-load into `buffer` the tile of rows from `row` (along M or N) and K from `k`, from an
    # operand stored with K contiguous ([rows, K]) or transposed ([K, rows])
    if K_CONTIGUOUS:
        tma.async_copy_global_to_shared(desc, [row, k], ready, buffer)
    else:
        tma.async_copy_global_to_shared(desc, [k, row], ready, buffer)


@gluon.jit
def column_slices(tile, SPLIT: gl.constexpr):
    # the tile as SPLIT column slices, left to right (SPLIT a power of two)
    slices = (tile,)
    for _ in gl.static_range(SPLIT.bit_length() - 1):
        halves = ()
        for j in gl.static_range(len(slices)):
            halves += column_halves(slices[j], slices[j].shape[0], slices[j].shape[1])
        slices = halves
    return slices


@gluon.jit
def load_partition(a_descs, b_desc, a_ring, b_ring, ready, empty, starts, ends, M, N, K,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                   GROUP_M: gl.constexpr, STAGES: gl.constexpr, A_PIECES: gl.constexpr,
                   A_CONCAT_K: gl.constexpr, A_K_CONTIGUOUS: gl.constexpr,
                   B_N_CONTIGUOUS: gl.constexpr, PAIRED: gl.constexpr):
    # One warp walks the program's tiles and their K blocks in order and fills ring slot
    # `step % STAGES` as soon as the MMA warpgroups release it (running ahead across tiles).
    # A in pieces (a Concat): along K each piece's blocks in turn, B's rows from where the piece
    # starts; along M only the piece that holds the tile's rows (whole row blocks).
    # PAIRED: a tile is two row blocks, a slot two A tiles (one a warpgroup) and one B tile.
    TILE_ROWS: gl.constexpr = 2 * BLOCK_M if PAIRED else BLOCK_M
    row_blocks = gl.cdiv(M, TILE_ROWS)
    col_blocks = gl.cdiv(N, BLOCK_N)
    nbytes: gl.constexpr = (1 + PAIRED) * a_descs[0].block_type.nbytes + b_desc.block_type.nbytes
    step = 0
    for tile_id in range(gl.program_id(0), row_blocks * col_blocks, gl.num_programs(0)):
        pid_m, pid_n = tile_coords(tile_id, row_blocks, col_blocks, GROUP_M)
        for i in gl.static_range(A_PIECES):
            row, k_first, k_blocks = pid_m * TILE_ROWS, starts[i], gl.cdiv(ends[i] - starts[i], BLOCK_K)
            if not A_CONCAT_K:
                row, k_first, k_blocks = pid_m * TILE_ROWS - starts[i], 0, 0
                if (pid_m * TILE_ROWS >= starts[i]) & (pid_m * TILE_ROWS < ends[i]):
                    k_blocks = gl.cdiv(K, BLOCK_K)
            for kb in range(k_blocks):
                slot = step % STAGES
                mbarrier.wait(empty.index(slot), ((step // STAGES) & 1) ^ 1)  # a fresh ring is empty
                mbarrier.expect(ready.index(slot), nbytes)
                if PAIRED:
                    for half in gl.static_range(2):
                        load_tile(a_descs[i], a_ring.index(2 * slot + half), ready.index(slot),
                                  row + half * BLOCK_M, kb * BLOCK_K, A_K_CONTIGUOUS)
                else:
                    load_tile(a_descs[i], a_ring.index(slot), ready.index(slot), row, kb * BLOCK_K,
                              A_K_CONTIGUOUS)
                load_tile(b_desc, b_ring.index(slot), ready.index(slot), pid_n * BLOCK_N,
                          k_first + kb * BLOCK_K, not B_N_CONTIGUOUS)
                step += 1


@gluon.jit
def k_step(a_tile, b_tile, acc, a, b):
    # one K block's MMA; the one before it is then done (one stays in flight)
    acc = warpgroup_mma(a_tile, b_tile, acc, is_async=True)
    acc, _, _ = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a, b))
    return acc


@gluon.jit
def k_step_summing(a_tile, b_tile, acc, a, b, ones, A_SUMS, pid_m, k0, K, BLOCK_K: gl.constexpr,
                   A_K_CONTIGUOUS: gl.constexpr):
    # k_step, and the column sums of the A tile (zero past M and K, TMA's fill) of columns k0 on
    # into row pid_m of the [row blocks, K] partials (`a_col_sums=True`), on the tensor cores:
    # A_tileᵀ @ ones, a [BLOCK_K, 8] MMA 1/16 the size of the tile's own. It is issued before the
    # tile's MMA and is done with the one before it, so the K loop waits for nothing more; summed
    # on the CUDA cores (shared-memory loads, conversions, shuffles) the sums doubled the
    # kernel's instructions (docs/benchmarks-log.md, forty-first session).
    sums_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                          instr_shape=[16, 8, 16])
    if A_K_CONTIGUOUS:   # a: [BLOCK_M, BLOCK_K]
        a_t = a.permute((1, 0))
    else:                # a: [BLOCK_K, BLOCK_M]
        a_t = a
    sums = warpgroup_mma(a_t, ones.permute((1, 0)), gl.zeros([BLOCK_K, 8], gl.float32, sums_layout),
                         use_acc=False, is_async=True)
    acc = warpgroup_mma(a_tile, b_tile, acc, is_async=True)
    acc, sums, _, _ = warpgroup_mma_wait(num_outstanding=1, deps=(acc, sums, a, b))
    # the eight columns of the sums are alike: the first one is stored
    cols = k0 + gl.arange(0, BLOCK_K, layout=gl.SliceLayout(1, sums_layout))
    first = gl.arange(0, 8, layout=gl.SliceLayout(0, sums_layout)) == 0
    gl.store(A_SUMS + pid_m * K + cols[:, None] + first[None, :].to(gl.int32) * 0, sums,
             mask=(cols < K)[:, None] & first[None, :])
    return acc


@gluon.jit
def mma_partition(a_ring, b_ring, ready, empty, turn, M, N, K, k_blocks, A_SUMS, seed{PARTITION_ARGS},
                  WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                  A_K_CONTIGUOUS: gl.constexpr, B_N_CONTIGUOUS: gl.constexpr,
                  EPILOGUE_SPLIT: gl.constexpr, SUM_A: gl.constexpr, PAIRED: gl.constexpr):
    # Warpgroup WG (0 or 1) takes every other tile of the program. The `turn` barriers pass the
    # tensor cores back and forth: a warpgroup runs its K loop once the other has issued its
    # last MMA, so each warpgroup's epilogue overlaps the other's K loop. The epilogue's tile
    # operands are fetched by TMA while the K loop runs; its outputs leave by TMA stores that
    # are waited for only before their buffer is written again.
    # PAIRED: both warpgroups take every tile of the program, of two row blocks, warpgroup WG
    # the row block 2 * pid_m + WG, their K loops and epilogues at the same time.
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BLOCK_N, 16])
    TILE_ROWS: gl.constexpr = 2 * BLOCK_M if PAIRED else BLOCK_M
    row_blocks = gl.cdiv(M, TILE_ROWS)
    col_blocks = gl.cdiv(N, BLOCK_N)
    programs = gl.num_programs(0)
    first_tile, tile_stride = gl.program_id(0) + WG * programs, 2 * programs
    if PAIRED:
        first_tile, tile_stride = gl.program_id(0), programs
    if SUM_A:   # the B operand of the column sums' MMA (k_step_summing)
        ones_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([8, BLOCK_M], a_ring.dtype)
        fill: gl.constexpr = gl.BlockedLayout([1, 8], [8, 4], [1, 4], [1, 0])
        ones = gl.allocate_shared_memory(a_ring.dtype, [8, BLOCK_M], ones_layout,
                                         gl.full([8, BLOCK_M], 1.0, a_ring.dtype, fill))
        fence_async_shared()
    rounds = 0
    for tile_id in range(first_tile, row_blocks * col_blocks, tile_stride):
        pid_m, pid_n = tile_coords(tile_id, row_blocks, col_blocks, GROUP_M)
        step = (2 * rounds + WG) * k_blocks  # the ring position of this tile's first K block
        if PAIRED:
            pid_m, step = 2 * pid_m + WG, rounds * k_blocks
{PREFETCH}
        if not PAIRED:
            mbarrier.wait(turn.index(WG), (rounds & 1) ^ (1 - WG))  # warpgroup 0 goes first
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        for kb in range(k_blocks):
            slot = step % STAGES
            mbarrier.wait(ready.index(slot), (step // STAGES) & 1)
            a = a_ring.index(2 * slot + WG if PAIRED else slot)
            b = b_ring.index(slot)
            if A_K_CONTIGUOUS:
                a_tile = a
            else:
                a_tile = a.permute((1, 0))
            if B_N_CONTIGUOUS:
                b_tile = b
            else:
                b_tile = b.permute((1, 0))
            # the tiles of a row block also sum A's columns, each K block by one tile in turn, so
            # no tile carries all the sums (pieces along K are whole K blocks here:
            # TritonProgram.plan joins others)
            if SUM_A:
                if kb % col_blocks == pid_n:
                    acc = k_step_summing(a_tile, b_tile, acc, a, b, ones, A_SUMS, pid_m, kb * BLOCK_K, K,
                                         BLOCK_K, A_K_CONTIGUOUS)
                else:
                    acc = k_step(a_tile, b_tile, acc, a, b)
            else:
                acc = k_step(a_tile, b_tile, acc, a, b)
            # the slot of the MMA before this one goes back
            mbarrier.arrive(empty.index((step + STAGES - 1) % STAGES), count=1, pred=kb > 0)
            step += 1
        if not PAIRED:
            mbarrier.arrive(turn.index(1 - WG), count=1)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index((step + STAGES - 1) % STAGES), count=1)
        # The epilogue sees EPILOGUE_SPLIT column slices of the tile, one after the other.
{TILES_WAIT}
        # (PAIRED: the second row block of the last tile may lie past M, wholly masked)
        slices = column_slices(acc, EPILOGUE_SPLIT)
        for j in gl.static_range(EPILOGUE_SPLIT):
            epilogue(slices[j], pid_m, pid_n * EPILOGUE_SPLIT + j, M, N, seed{SLICE_ARGS},
                     BLOCK_M, BLOCK_N // EPILOGUE_SPLIT)
{TILES_FREE}
        rounds += 1
    tma.store_wait(0)

{OPERAND_PARTITION}
@gluon.jit(do_not_specialize=["seed"])
def {KERNEL}(A, B, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, A1, A2, A3, CUT1, CUT2, CUT3,
              M_LIMIT, K_LIMIT, A_SUMS, seed{EPILOGUE_PARAMS},
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
              GROUP_M: gl.constexpr, STAGES: gl.constexpr, A_K_CONTIGUOUS: gl.constexpr,
              B_N_CONTIGUOUS: gl.constexpr, EPILOGUE_SPLIT: gl.constexpr,
              LOAD_REGS: gl.constexpr, MMA_REGS: gl.constexpr, A_PIECES: gl.constexpr,
              A_CONCAT_K: gl.constexpr, LIMIT_M: gl.constexpr, LIMIT_K: gl.constexpr,
              SUM_A: gl.constexpr, PAIRED: gl.constexpr):
    M, K = limited(M, K, M_LIMIT, K_LIMIT, LIMIT_M, LIMIT_K)
    # A ring of STAGES (A, B) tile pairs. An operand stored transposed (rows along M or N) is
    # loaded as stored and transposed as a view for the MMA. A is one tensor or A_PIECES joined
    # along K or M (a Concat): piece i spans [start, end) of that axis, with a descriptor each.
    starts, ends = piece_bounds(CUT1, CUT2, CUT3, K if A_CONCAT_K else M)
    # (PAIRED: two A tiles a slot, one for each warpgroup's row block)
    a_descs, a_ring = piece_rings(A, A1, A2, A3, starts, ends, M, K, stride_am, stride_ak, BLOCK_M,
                                  BLOCK_K, (1 + PAIRED) * STAGES, A_PIECES, A_CONCAT_K, A_K_CONTIGUOUS)
    k_blocks = tile_k_blocks(starts, ends, K, BLOCK_K, A_PIECES, A_CONCAT_K)
    if B_N_CONTIGUOUS:
        b_desc, b_ring = operand_ring(B, K, N, stride_bk, BLOCK_K, BLOCK_N, STAGES)
    else:
        b_desc, b_ring = operand_ring(B, N, K, stride_bn, BLOCK_N, BLOCK_K, STAGES)
    # ready[s]: slot s is loaded (TMA transaction bytes); empty[s]: the MMA reading it is done
    # (PAIRED: both warpgroups' MMAs); turn[w]: warpgroup w may run its K loop.
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1 + PAIRED)
    for w in gl.static_range(2):
        mbarrier.init(turn.index(w), count=1)
    # The epilogue's TMA tiles: descriptors and staging buffers (codegen/epilogue.py).
{PROLOGUE}
    fence_async_shared()
    gl.warp_specialize([
        (mma_partition, (a_ring, b_ring, ready, empty, turn, M, N, K, k_blocks, A_SUMS, seed{PARTITION_ARGS},
                         0, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, A_K_CONTIGUOUS,
                         B_N_CONTIGUOUS, EPILOGUE_SPLIT, SUM_A, PAIRED)),
        (mma_partition, (a_ring, b_ring, ready, empty, turn, M, N, K, k_blocks, A_SUMS, seed{PARTITION_ARGS},
                         1, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, A_K_CONTIGUOUS,
                         B_N_CONTIGUOUS, EPILOGUE_SPLIT, SUM_A, PAIRED)),
        (load_partition, (a_descs, b_desc, a_ring, b_ring, ready, empty, starts, ends, M, N, K,
                          BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, A_PIECES, A_CONCAT_K,
                          A_K_CONTIGUOUS, B_N_CONTIGUOUS, PAIRED)),{OPERAND_WORKER}
    ], [4, 1{OPERAND_WARPS}], [MMA_REGS, LOAD_REGS{OPERAND_REGS}])
'''

#: The ping-pong kernel's fourth partition where its warpgroups share one set of operand buffers
#: (`Config.share_tiles`): a warp that fetches every tile's operands, the two warpgroups' tiles in
#: turn, each once the other warpgroup's epilogue has released the buffers, so the K loops never
#: wait for that. epilogue.pingpong_parts fills in the operands' arguments and copies.
OPERAND_PARTITION = '''
@gluon.jit
def operand_partition(tiles_ready, tiles_free, {ARGS}, M, N, BLOCK_M: gl.constexpr,
                      BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr, EPILOGUE_SPLIT: gl.constexpr):
    row_blocks = gl.cdiv(M, BLOCK_M)
    col_blocks = gl.cdiv(N, BLOCK_N)
    i = 0   # this program's i-th tile is warpgroup i % 2's; the first fetch waits for nothing
    for tile_id in range(gl.program_id(0), row_blocks * col_blocks, gl.num_programs(0)):
        pid_m, pid_n = tile_coords(tile_id, row_blocks, col_blocks, GROUP_M)
        WG = i % 2
        mbarrier.wait(tiles_free.index(0), (i + 1) & 1)
{FETCH}
        i += 1
'''

MAP = '''
@triton.jit(do_not_specialize=["seed"])
def {KERNEL}(X, M, N, stride_xm, stride_xn, X1, X2, X3, CUT1, CUT2, CUT3, M_LIMIT, seed{EPILOGUE_PARAMS},
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, A_PIECES: tl.constexpr,
              A_CONCAT_K: tl.constexpr, LIMIT_M: tl.constexpr):
    # No GEMM: the epilogue's input is a tile of X (`Program.map`). X may come in A_PIECES pieces
    # (a Concat) joined along its columns (A_CONCAT_K) or rows, X1-X3 starting at CUT1-CUT3, each
    # a whole number of tiles wide or tall: the tile reads the piece it lies in.
    col_blocks = tl.cdiv(N, BLOCK_N)
    pid_m = tl.program_id(0) // col_blocks
    pid_n = tl.program_id(0) % col_blocks
    if LIMIT_M:   # rows from M_LIMIT on are not computed
        M = cm.limited(M, M_LIMIT)
        if pid_m * BLOCK_M >= M:
            return
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    piece, start = X, 0
    if A_PIECES > 1:
        at = pid_n * BLOCK_N if A_CONCAT_K else pid_m * BLOCK_M
        if at >= CUT1:
            piece, start = X1, CUT1
        if at >= CUT2:
            piece, start = X2, CUT2
        if at >= CUT3:
            piece, start = X3, CUT3
    if A_CONCAT_K:
        x = piece + rows[:, None] * stride_xm + (cols - start)[None, :] * stride_xn
    else:
        x = piece + (rows - start)[:, None] * stride_xm + cols[None, :] * stride_xn
    if (pid_n + 1) * BLOCK_N <= N:
        # A whole block of columns: the masks are constant along them, so the loads and stores
        # of a ragged N (the cross-entropy's 50257 columns) are as wide as those of an even one.
        acc = tl.load(x, mask=(rows < M)[:, None], other=0.0)
        epilogue(acc.to(tl.float32), pid_m, pid_n, M, N, seed{EPILOGUE_ARGS}, BLOCK_M, BLOCK_N, False)
    else:
        acc = tl.load(x, mask=(rows < M)[:, None] & (cols < N)[None, :], other=0.0)
        epilogue(acc.to(tl.float32), pid_m, pid_n, M, N, seed{EPILOGUE_ARGS}, BLOCK_M, BLOCK_N)
'''

MAINLOOPS = {"portable": TILE_HELPERS + PORTABLE, "hopper": TILE_HELPERS + HOPPER_PIECES + HOPPER,
             "pingpong": TILE_HELPERS + PINGPONG, "map": MAP}
#: The mainloops whose accumulator is zero past the output's edges (A and B read zero-filled by
#: TMA, the map's masked loads); the portable one wraps its rows and columns around instead.
ZERO_PAST_EDGES = frozenset({"hopper", "pingpong", "map"})

HEADER = '''"""Generated by CODA for epilogue `{NAME}` ({VARIANT} mainloop). Do not edit."""
import triton
import triton.language as tl

from coda.codegen import tl_math as cm

'''

"""The GEMM mainloops, written once. Each computes fp32 `acc = A @ B` for output tiles and hands
each finished tile to the generated `epilogue` function; nothing here knows what it computes.

`{EPILOGUE_PARAMS}` stands for the epilogue's operand/output parameters, `{EPILOGUE_ARGS}` for
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
"""

PORTABLE = '''
@triton.jit(do_not_specialize=["seed"])
def coda_gemm(A, B, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, seed{EPILOGUE_PARAMS},
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    row_blocks = tl.cdiv(M, BLOCK_M)
    col_blocks = tl.cdiv(N, BLOCK_N)
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
    a_ptrs = A + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = B + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    epilogue(acc, pid_m, pid_n, M, N, seed{EPILOGUE_ARGS}, BLOCK_M, BLOCK_N)
'''

HOPPER = '''
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


@triton.jit(do_not_specialize=["seed"])
def coda_gemm(A, B, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, seed{EPILOGUE_PARAMS},
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, A_K_CONTIGUOUS: tl.constexpr,
              B_N_CONTIGUOUS: tl.constexpr, EPILOGUE_SPLIT: tl.constexpr, FLATTEN: tl.constexpr,
              EPILOGUE_N: tl.constexpr):
    # A is [M, K] with K contiguous, or its transpose is: describe whichever is row-major.
    if A_K_CONTIGUOUS:
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
    # The epilogue recomputes its tile's coordinates from its own counter, so the flattened
    # loop carries no dependency from the K loop's tile index into the epilogue.
    epilogue_tile = tl.program_id(0) - NUM_SMS
    for tile_id in tl.range(tl.program_id(0), row_blocks * col_blocks, NUM_SMS, flatten=FLATTEN):
        pid_m, pid_n = tile_coords(tile_id, row_blocks, col_blocks, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kb in range(k_blocks):
            if A_K_CONTIGUOUS:
                a = a_desc.load([pid_m * BLOCK_M, kb * BLOCK_K])
            else:
                a = a_desc.load([kb * BLOCK_K, pid_m * BLOCK_M]).T
            if B_N_CONTIGUOUS:
                b = b_desc.load([kb * BLOCK_K, pid_n * BLOCK_N])
            else:
                b = b_desc.load([pid_n * BLOCK_N, kb * BLOCK_K]).T
            acc = tl.dot(a, b, acc)
        epilogue_tile += NUM_SMS
        pid_m, pid_n = tile_coords(epilogue_tile, row_blocks, col_blocks, GROUP_M)
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
'''

MAP = '''
@triton.jit(do_not_specialize=["seed"])
def coda_gemm(X, M, N, stride_xm, stride_xn, seed{EPILOGUE_PARAMS},
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # No GEMM: the epilogue's input is a tile of X (`Program.map`).
    col_blocks = tl.cdiv(N, BLOCK_N)
    pid_m = tl.program_id(0) // col_blocks
    pid_n = tl.program_id(0) % col_blocks
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    inside = (rows < M)[:, None] & (cols < N)[None, :]
    acc = tl.load(X + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=inside, other=0.0)
    epilogue(acc.to(tl.float32), pid_m, pid_n, M, N, seed{EPILOGUE_ARGS}, BLOCK_M, BLOCK_N)
'''

MAINLOOPS = {"portable": PORTABLE, "hopper": HOPPER, "map": MAP}

HEADER = '''"""Generated by CODA for epilogue `{NAME}` ({VARIANT} mainloop). Do not edit."""
import triton
import triton.language as tl

from coda.codegen import tl_math as cm

'''

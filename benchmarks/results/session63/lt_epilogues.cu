// cuBLASLt's own fused epilogues, each timed back to back with its plain GEMM: the vendor's
// forms of issue 8's cases, to read CODA's fast-path ratios against.
//   plain     D = A @ W^T                                   (bf16 in and out, fp32 accumulation)
//   bias_gelu D = gelu(A @ W^T + bias)                      CUBLASLT_EPILOGUE_GELU_BIAS    ~ (a)
//   residual  D = A @ W^T + R  (beta = 1, C = R, D apart)   CUBLASLT_EPILOGUE_DEFAULT      ~ (c) less its sums
//   dgelu_bgrad D = (A @ W^T) * gelu'(pre), db = col sums   CUBLASLT_EPILOGUE_DGELU_BGRAD  = (e)
// PyTorch's row-major [M, N] = A [M, K] @ W[N, K]^T is cuBLAS's column-major [N, M] = op(W) @ A
// with m = N, n = M, k = K, as torch.matmul lays it out.
// Each takes the fastest of the algorithms cuBLASLt's heuristic offers (up to 8; `first_us`: the
// heuristic's first, what torch would run), or with --first that first one alone. With --algos it
// times instead each algorithm offered for the plain GEMM against the first, back to back.
//   nvcc -O2 -arch=sm_90 -o lt_epilogues lt_epilogues.cu -lcublasLt && ./lt_epilogues [--first|--algos] 16384x3072x768 ...
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CHECK_CUDA(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    std::printf("{\"error\": \"%s: %s\"}\n", #x, cudaGetErrorString(e)); std::exit(1); } } while (0)
#define CHECK_LT(x) do { cublasStatus_t s = (x); if (s != CUBLAS_STATUS_SUCCESS) { \
    std::printf("{\"error\": \"%s: status %d\"}\n", #x, (int)s); return false; } } while (0)

__global__ void fill(__nv_bfloat16* x, size_t n, unsigned seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    x[i] = __float2bfloat16(scale * ((h & 0xffffff) / 8388608.0f - 1.0f));   // uniform in [-scale, scale)
  }
}

static __nv_bfloat16* random_bf16(size_t n, unsigned seed, float scale) {
  __nv_bfloat16* p;
  CHECK_CUDA(cudaMalloc(&p, n * sizeof(__nv_bfloat16)));
  fill<<<1024, 256>>>(p, n, seed, scale);
  CHECK_CUDA(cudaGetLastError());
  return p;
}

struct Gemm {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w = nullptr, a = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo;
  std::vector<cublasLtMatmulAlgo_t> offered;   // the heuristic's candidates, best first
  float beta = 0.0f;
  const void* c = nullptr;
};

static cublasLtHandle_t handle;
static void* workspace;
static const size_t WORKSPACE = 32u << 20;

// One configured matmul: `epilogue` with its bias / aux pointers, beta and C; the first algorithm
// cuBLASLt's heuristic offers (what torch does), and up to 8 more it offers (`fastest` picks).
static bool make(Gemm& g, int M, int N, int K, cublasLtEpilogue_t epilogue, const void* bias, const void* aux,
                 float beta, const void* c) {
  CHECK_LT(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
  CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
  CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)));
  CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (bias) CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (aux) {
    int64_t ld = N;
    CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
  }
  CHECK_LT(cublasLtMatrixLayoutCreate(&g.w, CUDA_R_16BF, K, N, K));   // W [N, K] row-major
  CHECK_LT(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_16BF, K, M, K));   // A [M, K] row-major
  CHECK_LT(cublasLtMatrixLayoutCreate(&g.d, CUDA_R_16BF, N, M, N));   // D, C, aux [M, N] row-major
  cublasLtMatmulPreference_t pref;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &WORKSPACE,
                                                sizeof(WORKSPACE)));
  cublasLtMatmulHeuristicResult_t results[8];
  int found = 0;
  CHECK_LT(cublasLtMatmulAlgoGetHeuristic(handle, g.desc, g.w, g.a, g.d, g.d, pref, 8, results, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (!found) { std::printf("{\"error\": \"no algorithm for epilogue %d\"}\n", (int)epilogue); return false; }
  for (int i = 0; i < found; ++i) g.offered.push_back(results[i].algo);
  g.algo = results[0].algo;
  g.beta = beta;
  g.c = c;
  return true;
}

static cublasStatus_t run(const Gemm& g, const void* w, const void* a, void* d) {
  const float alpha = 1.0f;
  return cublasLtMatmul(handle, g.desc, &alpha, w, g.w, a, g.a, &g.beta, g.c ? g.c : d, g.d, d, g.d, &g.algo,
                 workspace, WORKSPACE, 0);
}

// µs a launch: 20 launches between two events
static float time_us(const Gemm& g, const void* w, const void* a, void* d) {
  cudaEvent_t start, end;
  cudaEventCreate(&start);
  cudaEventCreate(&end);
  cudaEventRecord(start);
  for (int i = 0; i < 20; ++i) run(g, w, a, d);
  cudaEventRecord(end);
  cudaEventSynchronize(end);
  float ms;
  cudaEventElapsedTime(&ms, start, end);
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  return ms * 1e3f / 20;
}

// Takes the fastest of the algorithms the heuristic offered (autotuning, as a user of cuBLASLt
// could); returns the first one's time, the heuristic's own pick.
static bool first_only = false, algos_only = false;

static float fastest(Gemm& g, const void* w, const void* a, void* d) {
  if (first_only) g.offered.resize(1);
  float first = -1.0f, best = 1e30f;
  cublasLtMatmulAlgo_t chosen = g.offered[0];
  for (const cublasLtMatmulAlgo_t& algo : g.offered) {
    g.algo = algo;
    if (run(g, w, a, d) != CUBLAS_STATUS_SUCCESS || cudaDeviceSynchronize() != cudaSuccess) continue;
    run(g, w, a, d);
    float t = time_us(g, w, a, d);
    if (first < 0) first = t;
    if (t < best) best = t, chosen = algo;
  }
  g.algo = chosen;
  return first;
}

// Times g against base in `rounds` rounds of base, g, g, base (reversed in odd rounds; the sums
// divided: gemm.py's pairing) and prints the rest of a JSON line: g's median µs, the median ratio
// under `key` and each round's ratio.
static void print_paired(const Gemm& base, const Gemm& g, const void* w, const void* a, void* d, const char* key) {
  const int rounds = 5;
  std::vector<float> ratios, us;
  for (int i = 0; i < rounds; ++i) {
    const Gemm* order[4] = {&base, &g, &g, &base};
    if (i % 2) std::swap(order[0], order[1]), std::swap(order[2], order[3]);
    float t[4];
    for (int j = 0; j < 4; ++j) t[j] = time_us(*order[j], w, a, d);
    float outer = t[0] + t[3], inner = t[1] + t[2];
    ratios.push_back(i % 2 ? outer / inner : inner / outer);
    us.push_back(i % 2 ? outer / 2 : inner / 2);
  }
  std::vector<float> sorted = ratios;
  std::sort(sorted.begin(), sorted.end());
  std::sort(us.begin(), us.end());
  std::printf("\"us\": %.1f, \"%s\": %.3f, \"ratios\": [", us[rounds / 2], key, sorted[rounds / 2]);
  for (int i = 0; i < rounds; ++i) std::printf("%s%.3f", i ? ", " : "", ratios[i]);
  std::printf("]}\n");
  std::fflush(stdout);
}

// An algorithm's configuration as JSON members: what cuBLASLt's enums in cublasLt.h number
// (cublasLtMatmulTile_t, cublasLtMatmulStages_t, cublasLtClusterShape_t, ...).
static void print_config(const cublasLtMatmulAlgo_t& algo) {
  const struct { const char* name; cublasLtMatmulAlgoConfigAttributes_t attr; } fields[] = {
      {"id", CUBLASLT_ALGO_CONFIG_ID}, {"tile", CUBLASLT_ALGO_CONFIG_TILE_ID},
      {"stages", CUBLASLT_ALGO_CONFIG_STAGES_ID}, {"split_k", CUBLASLT_ALGO_CONFIG_SPLITK_NUM},
      {"reduction", CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME}, {"swizzle", CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING},
      {"custom", CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION}, {"inner_shape", CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID},
      {"cluster", CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID}};
  std::printf("\"config\": {");
  for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); ++f) {
    unsigned long long value = 0;
    size_t written = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&algo, fields[f].attr, &value, sizeof(value), &written);
    std::printf("%s\"%s\": %llu", f ? ", " : "", fields[f].name, value);
  }
  std::printf("}, ");
}

// The plain GEMM in each algorithm the heuristic offers, against its first (what torch runs).
static void print_algos(const Gemm& plain, int M, int N, int K, const void* w, const void* a, void* d) {
  for (size_t i = 1; i < plain.offered.size(); ++i) {
    Gemm other = plain;
    other.algo = plain.offered[i];
    cublasStatus_t status = run(other, w, a, d);
    for (int j = 0; j < 4; ++j) run(other, w, a, d);
    if (status != CUBLAS_STATUS_SUCCESS || cudaDeviceSynchronize() != cudaSuccess) continue;
    std::printf("{\"shape\": [%d, %d, %d], \"case\": \"plain_algo\", \"index\": %zu, ", M, N, K, i);
    print_config(other.algo);
    print_paired(plain, other, w, a, d, "over_first_paired");
  }
}

int main(int argc, char** argv) {
  cublasLtCreate(&handle);
  CHECK_CUDA(cudaMalloc(&workspace, WORKSPACE));
  for (int s = 1; s < argc; ++s) {
    if (std::string(argv[s]) == "--first") { first_only = true; continue; }
    if (std::string(argv[s]) == "--algos") { algos_only = true; continue; }
    int M, N, K;
    if (std::sscanf(argv[s], "%dx%dx%d", &M, &N, &K) != 3) return 2;
    __nv_bfloat16* a = random_bf16((size_t)M * K, 1, 1.0f);
    __nv_bfloat16* w = random_bf16((size_t)N * K, 2, 1.7f / std::sqrt((float)K));
    __nv_bfloat16* bias = random_bf16(N, 3, 1.0f);
    __nv_bfloat16* r = random_bf16((size_t)M * N, 4, 1.0f);
    __nv_bfloat16* pre = random_bf16((size_t)M * N, 5, 1.0f);
    __nv_bfloat16 *d, *db;
    CHECK_CUDA(cudaMalloc(&d, (size_t)M * N * sizeof(__nv_bfloat16)));
    CHECK_CUDA(cudaMalloc(&db, N * sizeof(__nv_bfloat16)));
    Gemm plain, gelu, residual, dgelu;
    bool ok = make(plain, M, N, K, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0.0f, nullptr);
    const char* names[] = {"bias_gelu", "residual", "dgelu_bgrad"};
    Gemm* cases[] = {&gelu, &residual, &dgelu};
    bool made[] = {make(gelu, M, N, K, CUBLASLT_EPILOGUE_GELU_BIAS, bias, nullptr, 0.0f, nullptr),
                   make(residual, M, N, K, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 1.0f, r),
                   make(dgelu, M, N, K, CUBLASLT_EPILOGUE_DGELU_BGRAD, db, pre, 0.0f, nullptr)};
    if (!ok) return 1;
    if (algos_only) {
      for (int i = 0; i < 5; ++i) run(plain, w, a, d);
      CHECK_CUDA(cudaDeviceSynchronize());
      std::printf("{\"shape\": [%d, %d, %d], \"case\": \"plain\", \"algos\": %zu, ", M, N, K,
                  plain.offered.size());
      print_config(plain.algo);
      std::printf("\"first_us\": %.1f}\n", time_us(plain, w, a, d));
      print_algos(plain, M, N, K, w, a, d);
    } else {
      float plain_first = fastest(plain, w, a, d);
      float case_first[3];
      for (int c = 0; c < 3; ++c) case_first[c] = made[c] ? fastest(*cases[c], w, a, d) : -1.0f;
      for (int i = 0; i < 5; ++i) run(plain, w, a, d);
      CHECK_CUDA(cudaDeviceSynchronize());
      std::printf("{\"shape\": [%d, %d, %d], \"case\": \"plain\", \"us\": %.1f, \"algos\": %zu, \"first_us\": %.1f}\n",
                  M, N, K, time_us(plain, w, a, d), plain.offered.size(), plain_first);
      for (int c = 0; c < 3; ++c) {
        if (!made[c]) continue;
        const Gemm& g = *cases[c];
        cublasStatus_t status = run(g, w, a, d);
        for (int i = 0; i < 4; ++i) run(g, w, a, d);
        cudaError_t e = cudaDeviceSynchronize();
        if (status != CUBLAS_STATUS_SUCCESS || e != cudaSuccess) {
          std::printf("{\"error\": \"%s: status %d, %s\"}\n", names[c], (int)status, cudaGetErrorString(e));
          continue;
        }
        std::printf("{\"shape\": [%d, %d, %d], \"case\": \"%s\", \"algos\": %zu, \"first_us\": %.1f, ",
                    M, N, K, names[c], g.offered.size(), case_first[c]);
        print_paired(plain, g, w, a, d, "over_plain_paired");
      }
    }
    cudaFree(a); cudaFree(w); cudaFree(bias); cudaFree(r); cudaFree(pre); cudaFree(d); cudaFree(db);
  }
  return 0;
}

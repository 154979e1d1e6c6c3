/* C = A B on 16-bit inputs: f16 A and B with an f32 C, then bf16 A and B with a bf16 C. The host
   converts with clkit_f32_to_f16 / clkit_f32_to_bf16 and back; the device reads 16-bit values
   and accumulates in f32 (on NVIDIA sm_80 and later, on the tensor cores). Checked against the
   CPU product of the rounded inputs.
   Build: cc matmul_f16.c $(pkg-config --cflags --libs clkit) -lm */
#include <clkit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define M 96
#define N 80
#define K 64

static float uniform(unsigned *seed) /* in [-1, 1) */
{
    *seed = *seed * 1664525u + 1013904223u;
    return (float)(*seed >> 8) / (float)(1u << 23) - 1.0f;
}

/* A device buffer of `bytes`, filled from `host` (NULL: left as it is) through the context's
   queue. */
static cl_mem upload(clkit_context *ctx, const void *host, size_t bytes)
{
    cl_context cl;
    cl_command_queue queue;
    clkit_context_cl(ctx, &cl, &queue, NULL);
    cl_int err;
    cl_mem m = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (m && host && (err = clEnqueueWriteBuffer(queue, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL)) != CL_SUCCESS) {
        clReleaseMemObject(m);
        m = NULL;
    }
    if (!m) fprintf(stderr, "buffer of %zu bytes: OpenCL error %d\n", bytes, err);
    return m;
}

/* C = A B for A (M, K) and B (K, N) of dtype `in` (f16 or bf16) and C of dtype `out`, from the
   f32 values a and b; c receives C as f32 and a and b the values the device saw (rounded). 0 on
   success, else the failure is printed. */
static int run(clkit_context *ctx, clkit_dtype in, clkit_dtype out, float *a, float *b, float *c)
{
    uint16_t a16[M * K], b16[K * N], c16[M * N];
    for (int i = 0; i < M * K; i++) {
        a16[i] = in == CLKIT_F16 ? clkit_f32_to_f16(a[i]) : clkit_f32_to_bf16(a[i]);
        a[i] = in == CLKIT_F16 ? clkit_f16_to_f32(a16[i]) : clkit_bf16_to_f32(a16[i]);
    }
    for (int i = 0; i < K * N; i++) {
        b16[i] = in == CLKIT_F16 ? clkit_f32_to_f16(b[i]) : clkit_f32_to_bf16(b[i]);
        b[i] = in == CLKIT_F16 ? clkit_f16_to_f32(b16[i]) : clkit_bf16_to_f32(b16[i]);
    }
    size_t c_bytes = (size_t)M * N * clkit_dtype_size(out);
    cl_mem ab = upload(ctx, a16, sizeof a16), bb = upload(ctx, b16, sizeof b16);
    cl_mem cb = upload(ctx, NULL, c_bytes); /* beta 0: C is only written */
    int failed = 1;
    if (ab && bb && cb) {
        int64_t as[2] = {M, K}, bs[2] = {K, N}, cs[2] = {M, N};
        clkit_tensor at = clkit_tensor_contiguous(ab, in, 2, as);
        clkit_tensor bt = clkit_tensor_contiguous(bb, in, 2, bs);
        clkit_tensor ct = clkit_tensor_contiguous(cb, out, 2, cs);
        clkit_status s = clkit_matmul(ctx, &at, &bt, &ct, NULL); /* NULL: alpha 1, beta 0 */
        if (s == CLKIT_OK) s = clkit_finish(ctx);
        cl_command_queue queue;
        clkit_context_cl(ctx, NULL, &queue, NULL);
        cl_int err = CL_SUCCESS;
        if (s != CLKIT_OK)
            fprintf(stderr, "matmul %s: %s\n", clkit_dtype_name(in), clkit_last_error(ctx));
        else if ((err = clEnqueueReadBuffer(queue, cb, CL_TRUE, 0, c_bytes, out == CLKIT_F32 ? (void *)c : (void *)c16,
                                            0, NULL, NULL)) != CL_SUCCESS)
            fprintf(stderr, "read: OpenCL error %d\n", err);
        else
            failed = 0;
    }
    for (int i = 0; !failed && out != CLKIT_F32 && i < M * N; i++)
        c[i] = out == CLKIT_F16 ? clkit_f16_to_f32(c16[i]) : clkit_bf16_to_f32(c16[i]);
    if (ab) clReleaseMemObject(ab);
    if (bb) clReleaseMemObject(bb);
    if (cb) clReleaseMemObject(cb);
    return failed;
}

/* Whether c matches the CPU product within f32 accumulation error (K 2^-23 sum |a b|, which
   also covers accumulators that truncate), plus half an ulp of the output dtype (rel: 2^-24
   for f32, 2^-8 for bf16's 8 significant bits). Prints the largest error. */
static int matches(const char *what, const float *a, const float *b, const float *c, double rel)
{
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double want = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                want += (double)a[i * K + k] * b[k * N + j];
                mag += fabs((double)a[i * K + k] * b[k * N + j]);
            }
            worst = fmax(worst, fabs(c[i * N + j] - want) / (rel * fabs(want) + K * 0x1p-23 * mag + 1e-30));
        }
    printf("%s: largest error %.2f of the tolerance (%s)\n", what, worst, worst <= 1 ? "ok" : "FAIL");
    return worst <= 1;
}

int main(void)
{
    clkit_context *ctx;
    clkit_status s = clkit_context_create(&ctx, NULL);
    if (s != CLKIT_OK) {
        fprintf(stderr, "no context: %s\n", clkit_status_string(s));
        return 1;
    }
    static float a[M * K], b[K * N], c[M * N];
    unsigned seed = 1;
    for (int i = 0; i < M * K; i++) a[i] = uniform(&seed);
    for (int i = 0; i < K * N; i++) b[i] = uniform(&seed);
    int ok = run(ctx, CLKIT_F16, CLKIT_F32, a, b, c) == 0 && matches("f16 x f16 -> f32", a, b, c, 0x1p-24);
    for (int i = 0; i < M * K; i++) a[i] = uniform(&seed);
    for (int i = 0; i < K * N; i++) b[i] = uniform(&seed);
    if (run(ctx, CLKIT_BF16, CLKIT_BF16, a, b, c) != 0 || !matches("bf16 x bf16 -> bf16", a, b, c, 0x1p-8))
        ok = 0;
    clkit_context_release(ctx);
    return !ok;
}

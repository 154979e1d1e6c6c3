/* Inputs and clkit outputs for bench/precision.py, which measures the error of each against a
   float64 reference beside PyTorch's on the same inputs (tensor-core f32 paths: 3xTF32 matmul
   and attention, against cuBLAS's SGEMM and torch's f32 attention).
   Usage (project root, CLKIT_DEVICE naming the device):
     bench/precision matmul N DIR      A, B (N x N, uniform [-1, 1)) -> DIR/ab.bin; C by the
                                       default path, exact_f32 and allow_tf32 -> DIR/c_*.bin
     bench/precision attention L DIR   q, k, v (1 x 4 x L x 128) -> DIR/qkv.bin; causal o
                                       -> DIR/o.bin (CLKIT_TENSOR_CORES=0: the portable path;
                                       rename it before the next run)
   Files are raw little-endian f32. Exits 1 with a message on any failure. */
#include <clkit.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "precision: %s: %s\n", what, why);
    return 1;
}

/* n values (each an f32, as ref_fill_random and ref_download give them) as raw f32. */
static int save(const char *dir, const char *name, const double *v, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    float *x = malloc(n * sizeof *x);
    FILE *f = x ? fopen(path, "wb") : NULL;
    if (!f) {
        free(x);
        return fail(path, "cannot write");
    }
    for (size_t i = 0; i < n; i++) x[i] = (float)v[i];
    size_t put = fwrite(x, sizeof *x, n, f);
    free(x);
    return fclose(f) != 0 || put != n ? fail(path, "short write") : 0;
}

static int matmul(clkit_context *ctx, int64_t n, const char *dir)
{
    size_t count = (size_t)(n * n);
    double *h = malloc(3 * count * sizeof *h);
    if (!h) return fail("matmul", "out of host memory");
    ref_fill_random(h, 2 * count, CLKIT_F32, -1.0, 1.0, 7);
    cl_mem a = ref_upload(ctx, CLKIT_F32, count, h), b = ref_upload(ctx, CLKIT_F32, count, h + count);
    cl_mem c = ref_upload(ctx, CLKIT_F32, count, NULL);
    int bad = !a || !b || !c ? fail("matmul", "cannot allocate device buffers") : save(dir, "ab.bin", h, 2 * count);
    int64_t shape[2] = {n, n};
    clkit_tensor ta = clkit_tensor_contiguous(a, CLKIT_F32, 2, shape),
                 tb = clkit_tensor_contiguous(b, CLKIT_F32, 2, shape),
                 tc = clkit_tensor_contiguous(c, CLKIT_F32, 2, shape);
    static const char *names[] = {"c_default.bin", "c_exact.bin", "c_tf32.bin"};
    for (int mode = 0; mode < 3 && !bad; mode++) {
        clkit_matmul_options o = clkit_matmul_defaults();
        o.exact_f32 = mode == 1, o.allow_tf32 = mode == 2;
        if (clkit_matmul(ctx, &ta, &tb, &tc, &o)) bad = fail("matmul", clkit_last_error(ctx));
        else if (ref_download(ctx, c, CLKIT_F32, count, h + 2 * count)) bad = fail("matmul", "cannot read C back");
        else bad = save(dir, names[mode], h + 2 * count, count);
    }
    cl_mem all[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (all[i]) clReleaseMemObject(all[i]);
    free(h);
    return bad;
}

static int attention(clkit_context *ctx, int64_t l, const char *dir)
{
    size_t count = (size_t)(4 * l * 128);
    double *h = malloc(4 * count * sizeof *h);
    if (!h) return fail("attention", "out of host memory");
    ref_fill_random(h, 3 * count, CLKIT_F32, -1.0, 1.0, 11);
    cl_mem m[4];
    for (int i = 0; i < 4; i++) m[i] = ref_upload(ctx, CLKIT_F32, count, i < 3 ? h + i * count : NULL);
    int bad = !m[0] || !m[1] || !m[2] || !m[3] ? fail("attention", "cannot allocate device buffers")
                                               : save(dir, "qkv.bin", h, 3 * count);
    int64_t shape[4] = {1, 4, l, 128};
    clkit_tensor t[4];
    for (int i = 0; i < 4; i++) t[i] = clkit_tensor_contiguous(m[i], CLKIT_F32, 4, shape);
    clkit_attention_options o = clkit_attention_defaults();
    o.causal = 1;
    if (!bad && clkit_attention_forward(ctx, &t[0], &t[1], &t[2], &o, &t[3], NULL))
        bad = fail("attention", clkit_last_error(ctx));
    if (!bad && ref_download(ctx, m[3], CLKIT_F32, count, h + 3 * count)) bad = fail("attention", "cannot read o back");
    if (!bad) bad = save(dir, "o.bin", h + 3 * count, count);
    for (int i = 0; i < 4; i++)
        if (m[i]) clReleaseMemObject(m[i]);
    free(h);
    return bad;
}

int main(int argc, char **argv)
{
    long size = argc == 4 ? strtol(argv[2], NULL, 10) : 0;
    int is_matmul = argc == 4 && !strcmp(argv[1], "matmul");
    if ((!is_matmul && (argc != 4 || strcmp(argv[1], "attention"))) || size < 1 || size > 65536) {
        fprintf(stderr, "usage: precision matmul N DIR | precision attention L DIR (1 <= N, L <= 65536)\n");
        return 2;
    }
    clkit_context *ctx;
    clkit_status s = clkit_context_create(&ctx, NULL);
    if (s) return fail("context", clkit_status_string(s));
    int bad = is_matmul ? matmul(ctx, size, argv[3]) : attention(ctx, size, argv[3]);
    clkit_context_release(ctx);
    return bad;
}

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

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "precision: %s: %s\n", what, why);
    return 1;
}

/* n values uniform in [-1, 1) from a fixed linear congruential sequence (the same files on
   every machine). */
static void fill(float *x, size_t n, unsigned seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 11) * 0x1p-53 * 2.0 - 1.0);
    }
}

static int save(const char *dir, const char *name, const float *x, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return fail(path, "cannot write");
    size_t put = fwrite(x, sizeof *x, n, f);
    return fclose(f) != 0 || put != n ? fail(path, "short write") : 0;
}

typedef struct device {
    clkit_context *ctx;
    cl_context cl;
    cl_command_queue queue;
} device;

static cl_mem buffer(const device *d, const float *host, size_t n)
{
    cl_int err;
    cl_mem m = clCreateBuffer(d->cl, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0),
                              n * sizeof(float), (void *)host, &err);
    return err == CL_SUCCESS ? m : NULL;
}

static int read_back(const device *d, cl_mem m, float *host, size_t n)
{
    return clEnqueueReadBuffer(d->queue, m, CL_TRUE, 0, n * sizeof(float), host, 0, NULL, NULL) != CL_SUCCESS;
}

static int matmul(const device *d, int64_t n, const char *dir)
{
    size_t count = (size_t)(n * n);
    float *h = malloc(3 * count * sizeof *h);
    if (!h) return fail("matmul", "out of host memory");
    fill(h, 2 * count, 7);
    cl_mem a = buffer(d, h, count), b = buffer(d, h + count, count), c = buffer(d, NULL, count);
    int bad = !a || !b || !c ? fail("matmul", "cannot allocate device buffers") : save(dir, "ab.bin", h, 2 * count);
    int64_t shape[2] = {n, n};
    clkit_tensor ta = clkit_tensor_contiguous(a, CLKIT_F32, 2, shape),
                 tb = clkit_tensor_contiguous(b, CLKIT_F32, 2, shape),
                 tc = clkit_tensor_contiguous(c, CLKIT_F32, 2, shape);
    static const char *names[] = {"c_default.bin", "c_exact.bin", "c_tf32.bin"};
    for (int mode = 0; mode < 3 && !bad; mode++) {
        clkit_matmul_options o = clkit_matmul_defaults();
        o.exact_f32 = mode == 1, o.allow_tf32 = mode == 2;
        if (clkit_matmul(d->ctx, &ta, &tb, &tc, &o)) bad = fail("matmul", clkit_last_error(d->ctx));
        else if (read_back(d, c, h + 2 * count, count)) bad = fail("matmul", "cannot read C back");
        else bad = save(dir, names[mode], h + 2 * count, count);
    }
    cl_mem all[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (all[i]) clReleaseMemObject(all[i]);
    free(h);
    return bad;
}

static int attention(const device *d, int64_t l, const char *dir)
{
    size_t count = (size_t)(4 * l * 128);
    float *h = malloc(4 * count * sizeof *h);
    if (!h) return fail("attention", "out of host memory");
    fill(h, 3 * count, 11);
    cl_mem m[4];
    for (int i = 0; i < 4; i++) m[i] = buffer(d, i < 3 ? h + i * count : NULL, count);
    int bad = !m[0] || !m[1] || !m[2] || !m[3] ? fail("attention", "cannot allocate device buffers")
                                               : save(dir, "qkv.bin", h, 3 * count);
    int64_t shape[4] = {1, 4, l, 128};
    clkit_tensor t[4];
    for (int i = 0; i < 4; i++) t[i] = clkit_tensor_contiguous(m[i], CLKIT_F32, 4, shape);
    clkit_attention_options o = clkit_attention_defaults();
    o.causal = 1;
    if (!bad && clkit_attention_forward(d->ctx, &t[0], &t[1], &t[2], &o, &t[3], NULL))
        bad = fail("attention", clkit_last_error(d->ctx));
    if (!bad && read_back(d, m[3], h + 3 * count, count)) bad = fail("attention", "cannot read o back");
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
    device d;
    clkit_status s = clkit_context_create(&d.ctx, NULL);
    if (s) return fail("context", clkit_status_string(s));
    clkit_context_cl(d.ctx, &d.cl, &d.queue, NULL);
    int bad = is_matmul ? matmul(&d, size, argv[3]) : attention(&d, size, argv[3]);
    clkit_context_release(d.ctx);
    return bad;
}

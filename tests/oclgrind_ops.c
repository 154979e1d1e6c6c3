/* Runs every op once per dtype on small ragged shapes (edges, strides, every kernel family and
   matmul kernel) for `oclgrind --check-api --data-races`, which reports out-of-bounds
   accesses, races and API misuse that results alone would not show. CI fails on any report.
   Exits nonzero if an op itself fails. */
#include <stdio.h>
#include <stdlib.h>

#include "clkit.h"
#include "ref/ref.h"
#include "util.h"

static int failures;
static double values[32768];

static void expect_ok(clkit_context *ctx, clkit_status s, const char *what)
{
    if (s == CLKIT_OK) return;
    fprintf(stderr, "%s: %s\n", what, clkit_last_error(ctx));
    failures++;
}

#define RUN(call) expect_ok(ctx, (call), #call)

/* A contiguous tensor over a buffer of exactly its size, so that any access past the view is
   past the buffer, where oclgrind sees it. */
static clkit_tensor exact(clkit_context *ctx, clkit_dtype dt, int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return clkit_tensor_contiguous(ref_upload(ctx, dt, (size_t)n, values), dt, ndim, shape);
}

static void release(int n, clkit_tensor *ts)
{
    for (int i = 0; i < n; i++) clReleaseMemObject(ts[i].buffer);
}

static void elementwise(clkit_context *ctx, clkit_dtype dt)
{
    int64_t n[1] = {1001}, n3[1] = {3001};
    clkit_tensor t[4] = {exact(ctx, dt, 1, n), exact(ctx, dt, 1, n), exact(ctx, dt, 1, n), exact(ctx, dt, 1, n3)};
    RUN(clkit_add(ctx, &t[0], &t[1], &t[2]));
    RUN(clkit_dropout(ctx, &t[0], &t[2], 0.3f, 7));
    clkit_tensor strided = t[3];
    strided.shape[0] = 1001, strided.strides[0] = 3;
    RUN(clkit_add(ctx, &strided, &t[1], &t[2]));
    RUN(clkit_dropout(ctx, &strided, &t[2], 0.3f, 7));
    release(4, t);
}

static void rows(clkit_context *ctx, clkit_dtype dt)
{
    static const int64_t shapes[][2] = {{7, 301}, {1, 5000}, {33, 45}};
    for (int i = 0; i < 3; i++) {
        clkit_tensor t[2] = {exact(ctx, dt, 2, shapes[i]), exact(ctx, dt, 2, shapes[i])};
        RUN(clkit_softmax(ctx, &t[0], &t[1]));
        RUN(clkit_swizzle2d(ctx, &t[0], &t[1], 4));
        clkit_tensor transposed = t[1];
        transposed.strides[0] = 1, transposed.strides[1] = shapes[i][0];
        RUN(clkit_copy(ctx, &t[0], &transposed));
        release(2, t);
    }
}

static void matmuls(clkit_context *ctx, clkit_dtype dt)
{
    static const char *configs[] = {
        "KERNEL=0,TILE=8", "KERNEL=1,TILE=8",
        "KERNEL=2,BLOCK_M=32,BLOCK_N=32,BLOCK_K=8,THREAD_M=4,THREAD_N=4,GROUP_M=2",
        "KERNEL=3,SK_COLS=8,SK_K=8,SK_M=4",
    };
    int64_t sa[2] = {37, 29}, sb[2] = {29, 41}, sc[2] = {37, 41};
    clkit_tensor t[3] = {exact(ctx, dt, 2, sa), exact(ctx, dt, 2, sb), exact(ctx, CLKIT_F32, 2, sc)};
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
        clkit_matmul_options o = clkit_matmul_defaults();
        o.config = configs[i];
        o.beta = 0.5f;
        RUN(clkit_matmul(ctx, &t[0], &t[1], &t[2], &o));
    }
    release(3, t);
}

static void layernorms(clkit_context *ctx, clkit_dtype dt)
{
    static const int64_t shapes[][2] = {{7, 301}, {2, 3000}};
    for (int i = 0; i < 2; i++) {
        int64_t m[1] = {shapes[i][0]}, n[1] = {shapes[i][1]};
        clkit_tensor x = exact(ctx, dt, 2, shapes[i]), y = exact(ctx, dt, 2, shapes[i]);
        clkit_tensor dy = exact(ctx, dt, 2, shapes[i]), dx = exact(ctx, dt, 2, shapes[i]);
        clkit_tensor w = exact(ctx, dt, 1, n), b = exact(ctx, dt, 1, n);
        clkit_tensor dw = exact(ctx, dt, 1, n), db = exact(ctx, dt, 1, n);
        clkit_tensor mean = exact(ctx, CLKIT_F32, 1, m), rstd = exact(ctx, CLKIT_F32, 1, m);
        RUN(clkit_layernorm_forward(ctx, &x, &w, &b, 1e-5f, &y, &mean, &rstd));
        RUN(clkit_layernorm_backward(ctx, &dy, &x, &w, &mean, &rstd, &dx, &dw, &db));
        clkit_tensor t[10] = {x, y, dy, dx, w, b, dw, db, mean, rstd};
        release(10, t);
    }
}

/* Targets come from `values` (in [0, 2)): all in range. */
static void cross_entropies(clkit_context *ctx, clkit_dtype dt)
{
    int64_t ls[2] = {5, 1000}, ts[1] = {5}, one[1] = {1};
    clkit_tensor logits = exact(ctx, dt, 2, ls), dlogits = exact(ctx, dt, 2, ls);
    clkit_tensor targets = exact(ctx, CLKIT_I32, 1, ts), loss = exact(ctx, CLKIT_F32, 1, one);
    clkit_tensor zl = exact(ctx, CLKIT_F32, 1, one);
    clkit_cross_entropy_options o = clkit_cross_entropy_defaults();
    o.label_smoothing = 0.1f, o.softcap = 30.0f, o.z_loss_scale = 1e-4f, o.z_loss = &zl;
    RUN(clkit_cross_entropy(ctx, &logits, &targets, &o, &loss, &dlogits));
    RUN(clkit_cross_entropy(ctx, &logits, &targets, NULL, &loss, &logits));

    int64_t xs[2] = {6, 40}, ws[2] = {150, 40}, bs[1] = {150}, t6[1] = {6};
    clkit_tensor x = exact(ctx, dt, 2, xs), w = exact(ctx, dt, 2, ws), b = exact(ctx, dt, 1, bs);
    clkit_tensor dx = exact(ctx, dt, 2, xs), dw = exact(ctx, dt, 2, ws), db = exact(ctx, dt, 1, bs);
    clkit_tensor tg = exact(ctx, CLKIT_I64, 1, t6), per_token = exact(ctx, CLKIT_F32, 1, t6);
    o = clkit_cross_entropy_defaults();
    o.reduction = CLKIT_REDUCTION_NONE;
    RUN(clkit_linear_cross_entropy(ctx, &x, &w, &b, &tg, &o, &per_token, &dx, &dw, &db));
    /* Several chunks, the last one ragged. */
    tu_setenv("CLKIT_LCE_CHUNK", "37");
    RUN(clkit_linear_cross_entropy(ctx, &x, &w, NULL, &tg, NULL, &loss, &dx, &dw, NULL));
    tu_unsetenv("CLKIT_LCE_CHUNK");
    clkit_tensor t[13] = {logits, dlogits, targets, loss, zl, x, w, b, dx, dw, db, tg, per_token};
    release(13, t);
}

/* Grouped-query, causal, Lq != Lk, a length off every block size. */
static void attentions(clkit_context *ctx, clkit_dtype dt)
{
    int64_t qs[4] = {1, 2, 37, 32}, ks[4] = {1, 1, 45, 32}, ls[3] = {1, 2, 37};
    clkit_tensor q = exact(ctx, dt, 4, qs), k = exact(ctx, dt, 4, ks), v = exact(ctx, dt, 4, ks);
    clkit_tensor o = exact(ctx, dt, 4, qs), dout = exact(ctx, dt, 4, qs), dq = exact(ctx, dt, 4, qs);
    clkit_tensor dk = exact(ctx, dt, 4, ks), dv = exact(ctx, dt, 4, ks);
    clkit_tensor lse = exact(ctx, CLKIT_F32, 3, ls);
    clkit_attention_options opt = clkit_attention_defaults();
    opt.causal = 1;
    RUN(clkit_attention_forward(ctx, &q, &k, &v, &opt, &o, &lse));
    RUN(clkit_attention_backward(ctx, &q, &k, &v, &o, &dout, &lse, &opt, &dq, &dk, &dv));
    clkit_tensor t[9] = {q, k, v, o, dout, dq, dk, dv, lse};
    release(9, t);
}

/* Decoding (the keys split over work-groups): two queries of four heads sharing two kv heads,
   in four batches, against 256 keys, bottom-right causal. Eight row blocks fill a wave of the
   portable kernel on oclgrind's one compute unit (a GPU to clkit: eight work-groups a unit),
   so the keys are not split: oclgrind, which knows no ordering between work-groups, would call
   the last split's reads of the others' partial results races. */
static void decoding(clkit_context *ctx, clkit_dtype dt)
{
    int64_t qs[4] = {4, 4, 2, 16}, ks[4] = {4, 2, 256, 16}, ls[3] = {4, 4, 2};
    clkit_tensor q = exact(ctx, dt, 4, qs), k = exact(ctx, dt, 4, ks), v = exact(ctx, dt, 4, ks);
    clkit_tensor o = exact(ctx, dt, 4, qs), lse = exact(ctx, CLKIT_F32, 3, ls);
    clkit_attention_options opt = clkit_attention_defaults();
    opt.causal = CLKIT_CAUSAL_BOTTOM_RIGHT;
    RUN(clkit_attention_forward(ctx, &q, &k, &v, &opt, &o, &lse));
    clkit_tensor t[5] = {q, k, v, o, lse};
    release(5, t);
}

static void grayscale(clkit_context *ctx)
{
    int64_t rgb_shape[3] = {3, 17, 23}, gray_shape[2] = {17, 23};
    for (int u8 = 0; u8 < 2; u8++) {
        clkit_dtype dt = u8 ? CLKIT_U8 : CLKIT_F32;
        clkit_tensor t[2] = {exact(ctx, dt, 3, rgb_shape), exact(ctx, dt, 2, gray_shape)};
        RUN(clkit_rgb_to_gray(ctx, &t[0], &t[1]));
        release(2, t);
    }
}

int main(void)
{
    clkit_context *ctx;
    if (clkit_context_create(&ctx, NULL) != CLKIT_OK) return 1;
    ref_fill_random(values, sizeof values / sizeof *values, CLKIT_F32, 0, 2, 1);
    for (int d = CLKIT_F32; d <= CLKIT_BF16; d++) {
        elementwise(ctx, (clkit_dtype)d);
        rows(ctx, (clkit_dtype)d);
        matmuls(ctx, (clkit_dtype)d);
        layernorms(ctx, (clkit_dtype)d);
        cross_entropies(ctx, (clkit_dtype)d);
        attentions(ctx, (clkit_dtype)d);
        decoding(ctx, (clkit_dtype)d);
    }
    grayscale(ctx);
    RUN(clkit_finish(ctx));
    clkit_context_release(ctx);
    printf("oclgrind_ops: %d failed\n", failures);
    return failures != 0;
}

/* The geometry of a convolution on NHWC images, shared by the patch kernels (conv.h) and the
 * direct kernels (conv_direct.h): input (N, H, W, C), filters (R, S, C, K), output
 * (N, P, Q, K), zero padding pad_h/pad_w, strides str_h/str_w, dilations dil_h/dil_w, with
 * P = (H + 2*pad_h - dil_h*(R-1) - 1) / str_h + 1 (and Q likewise).  The build inlines this
 * file into the cffi declarations of each header that includes it. */
#ifndef NEONLITE_CONV_GEOM_H
#define NEONLITE_CONV_GEOM_H
typedef struct {
    int64_t N;
    int64_t H;
    int64_t W;
    int64_t C;
    int64_t P;
    int64_t Q;
    int64_t R;
    int64_t S;
    int64_t pad_h;
    int64_t pad_w;
    int64_t str_h;
    int64_t str_w;
    int64_t dil_h;
    int64_t dil_w;
    int64_t K;
} conv_geom;
#endif

/* Region-of-interest JPEG decoding (jpeg_roi.h) with libjpeg-turbo's libjpeg API.
 *
 * Safety: libjpeg's default error handler prints and calls exit(); here an error manager
 * longjmps back to the call, which destroys its jpeg_decompress_struct (every allocation of
 * libjpeg is in its pools, freed with it) and returns a code with libjpeg's message.  Nothing
 * is printed.  A progress monitor stops a progressive file at scan max_scans + 1 (a file of
 * 10^5 empty scans otherwise makes libjpeg walk the whole coefficient buffer 10^5 times).
 *
 * Exactness: the pixels are those of a full decode cut to the box.  Columns:
 * jpeg_crop_scanline widens the crop to whole iMCUs, and libjpeg's fancy upsampling of
 * subsampled chroma treats the crop's first and last columns as image edges (it replicates
 * the chroma sample where the full image has a neighbour), so the crop asked for is the box
 * widened by COLUMN_MARGIN pixels on each side (inside the image) and the extra columns are
 * cut here (measured with libjpeg-turbo 2.1.5: tests/data/test_jpeg_roi.py fails on 4:2:2
 * and 4:2:0 files without the margin).  Rows: jpeg_skip_scanlines keeps the upsampler's
 * context rows, and the rows after a skip equal the full decode's (the same test). */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "jpeg_roi.h"

#ifdef NL_NO_LIBJPEG

int jroi_version(void) { return 0; }

static int jroi_missing(char *message, int message_size) {
    if (message_size > 0)
        snprintf(message, (size_t)message_size, "built without libjpeg (jpeglib.h or -ljpeg "
                 "not found)");
    return JROI_UNSUPPORTED;
}

int jroi_header(const uint8_t *data, int64_t size, int32_t *info, char *message,
                int message_size) {
    (void)data; (void)size; (void)info;
    return jroi_missing(message, message_size);
}

int jroi_decode(const uint8_t *data, int64_t size, const int32_t *box, int scale_denom,
                int channels, uint8_t *out, int64_t out_stride, int32_t *offset,
                int64_t max_side, int64_t max_pixels, int64_t max_memory, int max_scans,
                int32_t *warnings, char *message, int message_size) {
    (void)data; (void)size; (void)box; (void)scale_denom; (void)channels; (void)out;
    (void)out_stride; (void)offset;
    (void)max_side; (void)max_pixels; (void)max_memory; (void)max_scans; (void)warnings;
    return jroi_missing(message, message_size);
}

#else

#include <jpeglib.h>
#include <jerror.h>

#define COLUMN_MARGIN 1

/* libjpeg's error manager, extended with the way back and what to report */
struct nl_errors {
    struct jpeg_error_mgr pub;
    jmp_buf back;
    int code;
    int warnings;
    char *message;
    int message_size;
};

struct nl_progress {
    struct jpeg_progress_mgr pub;
    int max_scans;
};

static void nl_say(struct nl_errors *errors, j_common_ptr cinfo) {
    char text[JMSG_LENGTH_MAX];
    (*cinfo->err->format_message)(cinfo, text);
    if (errors->message_size > 0)
        snprintf(errors->message, (size_t)errors->message_size, "%s", text);
}

static int nl_classify(int msg_code) {
    switch (msg_code) {
#if JPEG_LIB_VERSION < 70 /* jerror.h has this code only for the libjpeg 6b API */
    case JERR_ARITH_NOTIMPL:
#endif
    case JERR_BAD_PRECISION:
    case JERR_CONVERSION_NOTIMPL:
    case JERR_NOT_COMPILED:
        return JROI_UNSUPPORTED;
    case JERR_OUT_OF_MEMORY:
    case JERR_NO_BACKING_STORE:
        return JROI_OUT_OF_MEMORY;
    case JERR_IMAGE_TOO_BIG:
    case JERR_WIDTH_OVERFLOW:
        return JROI_TOO_LARGE;
    default:
        return JROI_CORRUPT;
    }
}

static void nl_error_exit(j_common_ptr cinfo) {
    struct nl_errors *errors = (struct nl_errors *)cinfo->err;
    if (errors->code == JROI_OK) {
        errors->code = nl_classify(cinfo->err->msg_code);
        nl_say(errors, cinfo);
    }
    longjmp(errors->back, 1);
}

/* Warnings (level -1) are counted, except the end of the data reached early (libjpeg would
 * fill the rest with grey): an error, as Pillow's loader reports a truncated file.  Trace
 * messages (level >= 0) are dropped. */
static void nl_emit_message(j_common_ptr cinfo, int level) {
    struct nl_errors *errors = (struct nl_errors *)cinfo->err;
    if (level >= 0)
        return;
    if (cinfo->err->msg_code == JWRN_JPEG_EOF) {
        errors->code = JROI_CORRUPT;
        nl_say(errors, cinfo);
        longjmp(errors->back, 1);
    }
    errors->warnings++;
    cinfo->err->num_warnings++;
}

static void nl_output_message(j_common_ptr cinfo) { (void)cinfo; }

static void nl_monitor(j_common_ptr cinfo) {
    struct nl_progress *progress = (struct nl_progress *)cinfo->progress;
    struct nl_errors *errors = (struct nl_errors *)cinfo->err;
    j_decompress_ptr dinfo = (j_decompress_ptr)cinfo;
    if (cinfo->is_decompressor && dinfo->input_scan_number > progress->max_scans) {
        errors->code = JROI_TOO_MANY_SCANS;
        if (errors->message_size > 0)
            snprintf(errors->message, (size_t)errors->message_size, "more than %d progressive "
                     "scans", progress->max_scans);
        longjmp(errors->back, 1);
    }
}

int jroi_version(void) {
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
    return LIBJPEG_TURBO_VERSION_NUMBER;
#else
    return JPEG_LIB_VERSION;
#endif
}

static int nl_fail(struct nl_errors *errors, int code, const char *text) {
    errors->code = code;
    if (errors->message_size > 0)
        snprintf(errors->message, (size_t)errors->message_size, "%s", text);
    return code;
}

/* Create cinfo (its error manager already installed), cap libjpeg's memory at max_memory
 * bytes (0: no cap), set data as its source and read the header. */
static void nl_start(j_decompress_ptr cinfo, const uint8_t *data, int64_t size,
                     int64_t max_memory) {
    jpeg_create_decompress(cinfo);
    if (max_memory > 0)
        cinfo->mem->max_memory_to_use = (long)max_memory;
    jpeg_mem_src(cinfo, (unsigned char *)data, (unsigned long)size);
    jpeg_read_header(cinfo, TRUE);
}

static void nl_errors_init(struct nl_errors *errors, j_decompress_ptr cinfo, char *message,
                           int message_size) {
    cinfo->err = jpeg_std_error(&errors->pub);
    errors->pub.error_exit = nl_error_exit;
    errors->pub.emit_message = nl_emit_message;
    errors->pub.output_message = nl_output_message;
    errors->code = JROI_OK;
    errors->warnings = 0;
    errors->message = message;
    errors->message_size = message_size;
    if (message_size > 0)
        message[0] = '\0';
}

int jroi_header(const uint8_t *data, int64_t size, int32_t *info, char *message,
                int message_size) {
    struct jpeg_decompress_struct cinfo;
    struct nl_errors errors;
    nl_errors_init(&errors, &cinfo, message, message_size);
    if (size <= 0)
        return nl_fail(&errors, JROI_CORRUPT, "empty file");
    if (setjmp(errors.back)) {
        jpeg_destroy_decompress(&cinfo);
        return errors.code;
    }
    nl_start(&cinfo, data, size, 0);
    info[0] = (int32_t)cinfo.image_height;
    info[1] = (int32_t)cinfo.image_width;
    info[2] = cinfo.num_components;
    info[3] = (int32_t)cinfo.jpeg_color_space;
    info[4] = jpeg_has_multiple_scans(&cinfo) ? 1 : 0;
    info[5] = cinfo.data_precision;
    jpeg_destroy_decompress(&cinfo);
    return JROI_OK;
}

/* Refusals decided from the header alone, before any pixel is decoded. */
static int nl_check_header(j_decompress_ptr cinfo, struct nl_errors *errors, int64_t max_side,
                           int64_t max_pixels) {
    int64_t h = cinfo->image_height, w = cinfo->image_width;
    if (h <= 0 || w <= 0 || h > max_side || w > max_side || h * w > max_pixels) {
        char text[160];
        snprintf(text, sizeof text, "the image is %lldx%lld; at most %lld pixels a side and "
                 "%lld in all", (long long)h, (long long)w, (long long)max_side,
                 (long long)max_pixels);
        return nl_fail(errors, JROI_TOO_LARGE, text);
    }
    if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK ||
        cinfo->jpeg_color_space == JCS_UNKNOWN)
        return nl_fail(errors, JROI_UNSUPPORTED, "CMYK, YCCK or unknown colour space");
    if (cinfo->data_precision != 8)
        return nl_fail(errors, JROI_UNSUPPORTED, "not 8-bit samples");
    return JROI_OK;
}

/* Row `src` of `width` RGB pixels as luma in `dst`, by Pillow's convert("L") formula
 * (ITU-R 601-2 weights in 16-bit fixed point, rounded), so a grayscale decode of a colour
 * JPEG has Pillow's pixels. */
static void nl_rgb_to_luma(const JSAMPLE *src, uint8_t *dst, JDIMENSION width) {
    JDIMENSION x;
    for (x = 0; x < width; x++, src += 3)
        dst[x] = (uint8_t)((src[0] * 19595u + src[1] * 38470u + src[2] * 7471u + 0x8000u) >> 16);
}

/* The decode proper, after jpeg_start_decompress: the box's rows into out (rows out_stride
 * bytes apart, channels a pixel: 1 with 3 components is converted to luma).  Where offset is
 * given, the components are the channels and the widened crop's rows fit in out_stride
 * bytes, libjpeg writes them there itself and *offset is the box's first column in them;
 * otherwise each row goes through one row of the widened crop (in libjpeg's pool) and only
 * the box is copied (*offset 0). */
static void nl_read_box(j_decompress_ptr cinfo, const int32_t *box, int channels,
                        uint8_t *out, int64_t out_stride, int32_t *offset)
{
    JDIMENSION x0 = (JDIMENSION)(box[1] > COLUMN_MARGIN ? box[1] - COLUMN_MARGIN : 0);
    JDIMENSION x1 = (JDIMENSION)box[1] + (JDIMENSION)box[3] + COLUMN_MARGIN;
    JDIMENSION y0 = (JDIMENSION)box[0];
    JDIMENSION y1 = (JDIMENSION)box[0] + (JDIMENSION)box[2];
    JDIMENSION width, cut, y;
    size_t row_bytes = (size_t)box[3] * (size_t)channels;
    size_t components = (size_t)cinfo->output_components;
    JSAMPARRAY row = NULL;
    int direct;
    if (x1 > cinfo->output_width)
        x1 = cinfo->output_width;
    width = x1 - x0;
    jpeg_crop_scanline(cinfo, &x0, &width);
    cut = (JDIMENSION)box[1] - x0;
    direct = offset != NULL && components == (size_t)channels &&
        (int64_t)width * (int64_t)components <= out_stride;
    if (!direct)
        row = (*cinfo->mem->alloc_sarray)((j_common_ptr)cinfo, JPOOL_IMAGE,
                                           width * (JDIMENSION)components, 1);
    if (offset != NULL)
        *offset = direct ? (int32_t)cut : 0;
    if (y0 > 0 && jpeg_skip_scanlines(cinfo, y0) != y0)
        ERREXIT(cinfo, JERR_INPUT_EOF);
    for (y = y0; y < y1; y++) {
        uint8_t *dst = out + (int64_t)(y - y0) * out_stride;
        if (direct) {
            JSAMPROW target = dst;
            if (jpeg_read_scanlines(cinfo, &target, 1) != 1)
                ERREXIT(cinfo, JERR_INPUT_EOF);
            continue;
        }
        if (jpeg_read_scanlines(cinfo, row, 1) != 1)
            ERREXIT(cinfo, JERR_INPUT_EOF);
        if (components == (size_t)channels)
            memcpy(dst, row[0] + (size_t)cut * components, row_bytes);
        else
            nl_rgb_to_luma(row[0] + (size_t)cut * components, dst, (JDIMENSION)box[3]);
    }
}

int jroi_decode(const uint8_t *data, int64_t size, const int32_t *box, int scale_denom,
                int channels, uint8_t *out, int64_t out_stride, int32_t *offset,
                int64_t max_side, int64_t max_pixels, int64_t max_memory, int max_scans,
                int32_t *warnings, char *message, int message_size) {
    struct jpeg_decompress_struct cinfo;
    struct nl_errors errors;
    struct nl_progress progress;
    int refused;
    nl_errors_init(&errors, &cinfo, message, message_size);
    *warnings = 0;
    if (size <= 0)
        return nl_fail(&errors, JROI_CORRUPT, "empty file");
    if ((channels != 1 && channels != 3) || (scale_denom != 1 && scale_denom != 2 &&
        scale_denom != 4 && scale_denom != 8) || box[0] < 0 || box[1] < 0 || box[2] < 1 ||
        box[3] < 1 || max_scans < 1 || out_stride < (int64_t)box[3] * channels)
        return nl_fail(&errors, JROI_BAD_CALL, "bad channels, scale, box, row stride or scan "
                       "limit");
    if (setjmp(errors.back)) {
        *warnings = errors.warnings;
        jpeg_destroy_decompress(&cinfo);
        return errors.code;
    }
    nl_start(&cinfo, data, size, max_memory);
    refused = nl_check_header(&cinfo, &errors, max_side, max_pixels);
    if (refused != JROI_OK) {
        jpeg_destroy_decompress(&cinfo);
        return refused;
    }
    progress.pub.progress_monitor = nl_monitor;
    progress.max_scans = max_scans;
    cinfo.progress = &progress.pub;
    cinfo.out_color_space = channels == 1 && cinfo.jpeg_color_space == JCS_GRAYSCALE ?
        JCS_GRAYSCALE : JCS_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned int)scale_denom;
    cinfo.dct_method = JDCT_ISLOW;
    cinfo.do_fancy_upsampling = TRUE;
    jpeg_calc_output_dimensions(&cinfo);
    if ((int64_t)box[0] + box[2] > (int64_t)cinfo.output_height ||
        (int64_t)box[1] + box[3] > (int64_t)cinfo.output_width) {
        jpeg_destroy_decompress(&cinfo);
        return nl_fail(&errors, JROI_BAD_CALL, "the box does not lie inside the image");
    }
    jpeg_start_decompress(&cinfo);
    nl_read_box(&cinfo, box, channels, out, out_stride, offset);
    jpeg_abort_decompress(&cinfo);
    *warnings = errors.warnings;
    jpeg_destroy_decompress(&cinfo);
    return JROI_OK;
}

#endif

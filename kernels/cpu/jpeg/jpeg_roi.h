/* Region-of-interest JPEG decoding with libjpeg(-turbo)'s API (jpeg_roi.c): one box of an
 * image, optionally at a reduced DCT scale, decoded straight into the caller's uint8 rows.
 *
 * Built with -ljpeg where the compiler finds jpeglib.h and links libjpeg; elsewhere with
 * -DNL_NO_LIBJPEG, as a stub whose jroi_version() is 0 and whose calls return
 * JROI_UNSUPPORTED (the caller then decodes with Pillow). */

/* return codes of jroi_header and jroi_decode (message: libjpeg's words, or ours) */
#define JROI_OK 0
#define JROI_CORRUPT 1
#define JROI_UNSUPPORTED 2
#define JROI_TOO_LARGE 3
#define JROI_TOO_MANY_SCANS 4
#define JROI_BAD_CALL 5
#define JROI_OUT_OF_MEMORY 6

/* LIBJPEG_TURBO_VERSION_NUMBER of the library compiled against (e.g. 2001005 for 2.1.5),
 * 62 or 80 (JPEG_LIB_VERSION) for another libjpeg, 0 for the stub. */
int jroi_version(void);

/* The header of the JPEG data[0..size): info[0..5] = height, width, components,
 * jpeg_color_space (libjpeg's J_COLOR_SPACE), progressive (0 or 1), data precision (bits).
 * Nothing is decoded.  message (message_size bytes) gets the error's words. */
int jroi_header(const uint8_t *data, int64_t size, int32_t *info, char *message,
                int message_size);

/* Decode box[0..3] = (top, left, height, width) of the JPEG data[0..size) decoded at
 * 1/scale_denom (1, 2, 4 or 8; libjpeg's DCT scaling: an image of H x W pixels is
 * ceil(H/scale_denom) x ceil(W/scale_denom) and the box is in those coordinates) into out,
 * uint8 rows of out_stride bytes (at least width * channels), channels a pixel: 3 is RGB, 1
 * grayscale (a colour JPEG's RGB converted as Pillow's convert("L") does).  offset NULL: row
 * y of the box is out[y * out_stride ..], its pixels alone.  offset given: where the rows
 * libjpeg decodes (the box widened to whole iMCU columns, at most 2 + 31 pixels wider) fit
 * in out_stride bytes and need no conversion, libjpeg writes them straight into out (no
 * copy) and *offset is the box's first column in them, else *offset is 0 and the rows are
 * the box's alone; the other bytes of out are left as they were.  The box's pixels are
 * those of a full decode at the same scale, bit for bit: only the iMCU columns around the
 * box are decoded (jpeg_crop_scanline), the rows above it skipped (jpeg_skip_scanlines) and
 * decoding stops after its last row.
 *
 * Refused before any pixel is decoded: a side longer than max_side or more than max_pixels
 * pixels (JROI_TOO_LARGE); CMYK/YCCK colour, a precision other than 8 bits, arithmetic coding
 * where libjpeg lacks it (JROI_UNSUPPORTED).  A progressive file of more than max_scans scans
 * stops at the next one (JROI_TOO_MANY_SCANS); libjpeg's working memory is capped at
 * max_memory bytes (JROI_OUT_OF_MEMORY past it).  Corrupt data and the end of the data
 * reached before the box's last row give JROI_CORRUPT with libjpeg's message; other libjpeg
 * warnings (e.g. extraneous bytes) are counted in *warnings.  Nothing is printed, nothing
 * leaks on any path. */
int jroi_decode(const uint8_t *data, int64_t size, const int32_t *box, int scale_denom,
                int channels, uint8_t *out, int64_t out_stride, int32_t *offset,
                int64_t max_side, int64_t max_pixels, int64_t max_memory, int max_scans,
                int32_t *warnings, char *message, int message_size);

/*
 * mpi_coll_bench: a small, plain MPI benchmark of four collectives, written to cross-check
 * psybench's MPI backend (`psybench <coll> --backend mpi`). It measures what an MPI user
 * measures, with the same sizes, iteration counts and cadences as psybench:
 *
 *   mpirun -n 2 mpi_coll_bench allreduce --cadence stream --sizes 8,64K,1M,16M,64M
 *
 * Collectives (f32, sum, root 0): allreduce (MPI_Allreduce, in place with MPI_IN_PLACE unless
 * --out-of-place), broadcast (MPI_Bcast, one buffer), allgather (MPI_Allgather, separate send and
 * receive buffers), reducescatter (MPI_Reduce_scatter_block, separate send and receive buffers).
 *
 * Size, as nccl-tests and psybench define it: allreduce and broadcast, the buffer; allgather, the
 * gathered output; reducescatter, each rank's input. A size is rounded up to whole f32 elements,
 * and for allgather and reducescatter the count further up to a multiple of the ranks.
 *
 * Iterations: iters = clamp(2^30 / bytes, 5, 1000), warmup = clamp(iters / 10, 2, 20) (bytes
 * after rounding), as psybench's default; --iters and --warmup override them.
 *
 * Cadences:
 *   stream  MPI_Barrier, then one clock around `iters` back-to-back calls; time = elapsed / iters
 *           (nccl-tests style).
 *   osu     per iteration: t0 = MPI_Wtime(), call, t1 = MPI_Wtime(), sum += t1 - t0, then an
 *           untimed MPI_Barrier; time = sum / iters (OSU micro-benchmarks style).
 *
 * Per size: buffers allocated once with malloc (as psybench's Vec and most programs do; OSU aligns
 * them to pages, --page-aligned here) and filled; one untimed run on freshly filled
 * buffers is checked element by element; the buffers are filled again; `warmup` untimed calls
 * back to back; then the timed loop. Each rank's mean time per call is reduced to rank 0 as max,
 * mean and min over ranks. Rank 0 prints one CSV line per size (header first):
 *
 *   collective,cadence,ranks,bytes,count,iters,warmup,in_place,time_us_avg,time_us_max,
 *   time_us_min,wrong
 *
 * Exit status: 0 all results right, 1 some element wrong, 2 usage error, 3 an MPI or allocation
 * error (the job is aborted). MPI_COLL_BENCH_TEST_CORRUPT=1 (for tests) spoils one element of
 * rank 0's checked result, to show that the check catches it.
 */
#define _POSIX_C_SOURCE 200809L

#include <mpi.h>

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ITER_BUDGET_BYTES (UINT64_C(1) << 30)
#define MIN_ITERS UINT64_C(5)
#define MAX_ITERS UINT64_C(1000)
#define MAX_SIZES 64
#define EXIT_WRONG 1
#define EXIT_USAGE 2

enum coll { ALLREDUCE, BROADCAST, ALLGATHER, REDUCESCATTER };
enum cadence { STREAM, OSU };

static const char *const COLL_NAMES[] = {"allreduce", "broadcast", "allgather", "reducescatter"};
static const char *const CADENCE_NAMES[] = {"stream", "osu"};

struct options {
    enum coll coll;
    enum cadence cadence;
    uint64_t sizes[MAX_SIZES];
    int nsizes;
    uint64_t iters;  /* 0: by size */
    uint64_t warmup; /* meaningful only if warmup_set */
    int warmup_set;
    int out_of_place;
    int page_aligned;
    int header;
};

static int g_rank = 0;

static const char USAGE[] =
    "usage: mpirun -n N mpi_coll_bench COLLECTIVE [options]\n"
    "\n"
    "COLLECTIVE: allreduce | broadcast | allgather | reducescatter (f32, sum, root 0)\n"
    "\n"
    "options:\n"
    "  --cadence stream|osu  stream: barrier, one clock around all iterations (nccl-tests);\n"
    "                        osu: each call timed alone, an untimed barrier after it (OSU)\n"
    "                        [default: stream]\n"
    "  --sizes LIST|MIN:MAX  bytes, suffixes K M G (K = 1024): 8,64K,1M or 8:64M (factor 2)\n"
    "                        [default: 8,64K,1M,16M,64M]\n"
    "  --iters N             timed iterations [default: clamp(2^30 / bytes, 5, 1000)]\n"
    "  --warmup N            untimed iterations first [default: clamp(default iters / 10, 2, 20),\n"
    "                        whatever --iters says, as psybench]\n"
    "  --out-of-place        allreduce with separate send and receive buffers (OSU's default;\n"
    "                        default here: in place, MPI_IN_PLACE, as psyne's all_reduce)\n"
    "  --page-aligned        page-aligned buffers (as OSU) instead of malloc's (as psybench)\n"
    "  --funneled            MPI_Init_thread(MPI_THREAD_FUNNELED) instead of MPI_Init, to\n"
    "                        measure what the thread level costs\n"
    "  --no-header           do not print the CSV header line\n"
    "  -h, --help            this text\n"
    "\n"
    "Output (rank 0, CSV): collective,cadence,ranks,bytes,count,iters,warmup,in_place,\n"
    "time_us_avg,time_us_max,time_us_min,wrong   (times: microseconds per call; avg, max,\n"
    "min over ranks of each rank's mean)\n";

/* A usage error: every rank parses the same arguments, so every rank gets here; rank 0 says why. */
static int usage_error(const char *fmt, ...) {
    if (g_rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        fputs("mpi_coll_bench: error: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputs("\n(--help for usage)\n", stderr);
        va_end(ap);
    }
    return EXIT_USAGE;
}

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mpi_coll_bench: rank %d: error: ", g_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3);
}

/* MPI calls return errors (MPI_ERRORS_RETURN); any error names the call and aborts the job. */
#define MPI_CHECK(call)                                                                       \
    do {                                                                                      \
        int rc_ = (call);                                                                     \
        if (rc_ != MPI_SUCCESS) {                                                             \
            char msg_[MPI_MAX_ERROR_STRING];                                                  \
            int len_ = 0;                                                                     \
            MPI_Error_string(rc_, msg_, &len_);                                               \
            die("%s failed: %s", #call, msg_);                                                \
        }                                                                                     \
    } while (0)

/* One size: digits with an optional binary suffix K, M, G, T (case-insensitive), optionally
 * followed by B or iB. Returns 0 on success. */
static int parse_size(const char *text, uint64_t *out) {
    const char *p = text;
    while (isspace((unsigned char)*p)) p++;
    if (!isdigit((unsigned char)*p)) return -1;
    errno = 0;
    char *end = NULL;
    unsigned long long n = strtoull(p, &end, 10);
    if (errno != 0) return -1;
    int shift = 0;
    switch (tolower((unsigned char)*end)) {
    case 'k': shift = 10; end++; break;
    case 'm': shift = 20; end++; break;
    case 'g': shift = 30; end++; break;
    case 't': shift = 40; end++; break;
    default: break;
    }
    if (shift != 0 && tolower((unsigned char)*end) == 'i' && tolower((unsigned char)end[1]) == 'b')
        end += 2;
    else if (tolower((unsigned char)*end) == 'b')
        end++;
    while (isspace((unsigned char)*end)) end++;
    if (*end != '\0') return -1;
    if (n > (UINT64_MAX >> shift)) return -1;
    *out = (uint64_t)n << shift;
    return 0;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* `A,B,C` (sorted, duplicates dropped, like psybench) or `MIN:MAX` (MIN, 2*MIN, ... <= MAX). */
static int parse_sizes(const char *text, struct options *o) {
    char buf[1024];
    if (strlen(text) >= sizeof buf) return usage_error("--sizes: list too long");
    strcpy(buf, text);
    char *colon = strchr(buf, ':');
    o->nsizes = 0;
    if (colon != NULL) {
        *colon = '\0';
        uint64_t lo, hi;
        if (parse_size(buf, &lo) != 0 || parse_size(colon + 1, &hi) != 0)
            return usage_error("--sizes %s: write MIN:MAX with sizes like 8, 64K, 1M", text);
        if (lo == 0 || lo > hi)
            return usage_error("--sizes %s: a range needs 0 < MIN <= MAX", text);
        for (uint64_t s = lo; s <= hi; s *= 2) {
            if (o->nsizes == MAX_SIZES) return usage_error("--sizes %s: more than %d sizes", text, MAX_SIZES);
            o->sizes[o->nsizes++] = s;
            if (s > UINT64_MAX / 2) break;
        }
        return 0;
    }
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        uint64_t s;
        if (parse_size(tok, &s) != 0)
            return usage_error("--sizes: `%s` is not a size; write bytes with an optional suffix K, M, G "
                               "(K = 1024), e.g. 8,64K,1M",
                               tok);
        if (s == 0)
            return usage_error("--sizes: size 0 moves nothing (psybench's MPI backend does not call "
                               "MPI for it); start at 1");
        if (o->nsizes == MAX_SIZES) return usage_error("--sizes: more than %d sizes", MAX_SIZES);
        o->sizes[o->nsizes++] = s;
    }
    if (o->nsizes == 0) return usage_error("--sizes: empty list");
    qsort(o->sizes, (size_t)o->nsizes, sizeof o->sizes[0], cmp_u64);
    int n = 1;
    for (int i = 1; i < o->nsizes; i++)
        if (o->sizes[i] != o->sizes[n - 1]) o->sizes[n++] = o->sizes[i];
    o->nsizes = n;
    return 0;
}

static int parse_count(const char *flag, const char *text, uint64_t min, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    if (text == NULL || !isdigit((unsigned char)*text))
        return usage_error("%s needs a whole number", flag);
    unsigned long long n = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || n < min)
        return usage_error("%s %s: needs a whole number >= %llu", flag, text, (unsigned long long)min);
    *out = n;
    return 0;
}

/* Returns 0, EXIT_USAGE, or -1 for --help (printed). */
static int parse_args(int argc, char **argv, struct options *o) {
    memset(o, 0, sizeof *o);
    o->header = 1;
    o->cadence = STREAM;
    int have_coll = 0, have_sizes = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            if (g_rank == 0) fputs(USAGE, stdout);
            return -1;
        } else if (strcmp(a, "--cadence") == 0) {
            if (next == NULL) return usage_error("--cadence needs stream or osu");
            if (strcmp(next, "stream") == 0)
                o->cadence = STREAM;
            else if (strcmp(next, "osu") == 0)
                o->cadence = OSU;
            else
                return usage_error("--cadence %s: use stream or osu", next);
            i++;
        } else if (strcmp(a, "--sizes") == 0) {
            if (next == NULL) return usage_error("--sizes needs a list, e.g. 8,64K,1M");
            int rc = parse_sizes(next, o);
            if (rc != 0) return rc;
            have_sizes = 1;
            i++;
        } else if (strcmp(a, "--iters") == 0) {
            int rc = parse_count(a, next, 1, &o->iters);
            if (rc != 0) return rc;
            i++;
        } else if (strcmp(a, "--warmup") == 0) {
            int rc = parse_count(a, next, 0, &o->warmup);
            if (rc != 0) return rc;
            o->warmup_set = 1;
            i++;
        } else if (strcmp(a, "--out-of-place") == 0) {
            o->out_of_place = 1;
        } else if (strcmp(a, "--page-aligned") == 0) {
            o->page_aligned = 1;
        } else if (strcmp(a, "--funneled") == 0) {
            /* Read before MPI_Init, in main. */
        } else if (strcmp(a, "--no-header") == 0) {
            o->header = 0;
        } else if (a[0] == '-') {
            return usage_error("unknown option %s", a);
        } else if (have_coll) {
            return usage_error("one collective only (got %s and %s)", COLL_NAMES[o->coll], a);
        } else {
            if (strcmp(a, "allreduce") == 0 || strcmp(a, "all-reduce") == 0)
                o->coll = ALLREDUCE;
            else if (strcmp(a, "broadcast") == 0 || strcmp(a, "bcast") == 0)
                o->coll = BROADCAST;
            else if (strcmp(a, "allgather") == 0 || strcmp(a, "all-gather") == 0)
                o->coll = ALLGATHER;
            else if (strcmp(a, "reducescatter") == 0 || strcmp(a, "reduce-scatter") == 0)
                o->coll = REDUCESCATTER;
            else
                return usage_error("unknown collective %s: use allreduce, broadcast, allgather or "
                                   "reducescatter",
                                   a);
            have_coll = 1;
        }
    }
    if (!have_coll)
        return usage_error("name a collective: allreduce, broadcast, allgather or reducescatter");
    if (o->out_of_place && o->coll != ALLREDUCE)
        return usage_error("--out-of-place applies to allreduce only (allgather and reducescatter "
                           "always run out of place, broadcast in its one buffer)");
    if (!have_sizes) {
        int rc = parse_sizes("8,64K,1M,16M,64M", o);
        if (rc != 0) return rc;
    }
    return 0;
}

/* psybench's sizes::element_count for f32: bytes rounded up to whole elements, and for the
 * collectives whose size is a total split over ranks, up to a multiple of the ranks. */
static uint64_t element_count(enum coll c, uint64_t bytes, int ranks) {
    uint64_t count = (bytes + sizeof(float) - 1) / sizeof(float);
    if (c == ALLGATHER || c == REDUCESCATTER) {
        uint64_t r = (uint64_t)ranks;
        count = (count + r - 1) / r * r;
    }
    return count;
}

/* psybench's sizes::default_iters. */
static void default_iters(uint64_t bytes, uint64_t *warmup, uint64_t *iters) {
    uint64_t it = ITER_BUDGET_BYTES / (bytes > 0 ? bytes : 1);
    if (it < MIN_ITERS) it = MIN_ITERS;
    if (it > MAX_ITERS) it = MAX_ITERS;
    uint64_t w = it / 10;
    if (w < 2) w = 2;
    if (w > 20) w = 20;
    *iters = it;
    *warmup = w;
}

/* Rank r's input value at global index i: small integers, so every sum is exact in f32. */
static float input_value(int rank, uint64_t i) { return (float)(rank + 1 + (int)(i % 7)); }

/* malloc, or page-aligned memory. Alignment is not neutral: page-aligned send and receive
 * buffers sit at the same offsets within their pages, and a reduction reading one while writing
 * the other can stall on 4K aliasing (reduce-scatter at 64 KiB measured about 1.6x slower here). */
static float *alloc_floats(uint64_t n, int page_aligned, const char *what) {
    void *p = NULL;
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    int rc = 0;
    if (page_aligned) {
        long page = sysconf(_SC_PAGESIZE);
        rc = posix_memalign(&p, page > 0 ? (size_t)page : 4096, bytes);
    } else {
        p = malloc(bytes);
        rc = p == NULL ? ENOMEM : 0;
    }
    if (rc != 0) die("cannot allocate %zu bytes for the %s buffer: %s", bytes, what, strerror(rc));
    return p;
}

struct bufs {
    float *a; /* allreduce/broadcast: the buffer (in-place allreduce); others: the send buffer */
    float *b; /* allgather/reducescatter, out-of-place allreduce: the receive buffer; else NULL */
    uint64_t a_len, b_len;
};

/* Fills (touches) the buffers with this rank's input; receive buffers and non-root broadcast
 * buffers get -1, a value no right result has. */
static void fill(const struct options *o, struct bufs *b, int rank) {
    switch (o->coll) {
    case ALLREDUCE:
        for (uint64_t i = 0; i < b->a_len; i++) b->a[i] = input_value(rank, i);
        break;
    case BROADCAST:
        for (uint64_t i = 0; i < b->a_len; i++) b->a[i] = rank == 0 ? input_value(0, i) : -1.0f;
        break;
    case ALLGATHER:
        /* The send chunk is elements rank*chunk.. of the gathered result. */
        for (uint64_t k = 0; k < b->a_len; k++) b->a[k] = input_value(rank, (uint64_t)rank * b->a_len + k);
        break;
    case REDUCESCATTER:
        for (uint64_t i = 0; i < b->a_len; i++) b->a[i] = input_value(rank, i);
        break;
    }
    if (b->b != NULL)
        for (uint64_t i = 0; i < b->b_len; i++) b->b[i] = -1.0f;
}

/* Wrong elements of this rank's result after one run from freshly filled buffers. */
static uint64_t count_wrong(const struct options *o, const struct bufs *b, int rank, int ranks) {
    uint64_t wrong = 0;
    float base = (float)(ranks * (ranks + 1) / 2); /* sum over ranks of (rank + 1) */
    switch (o->coll) {
    case ALLREDUCE: {
        const float *res = b->b != NULL ? b->b : b->a;
        uint64_t n = b->b != NULL ? b->b_len : b->a_len;
        for (uint64_t i = 0; i < n; i++)
            if (res[i] != base + (float)ranks * (float)(i % 7)) wrong++;
        break;
    }
    case BROADCAST:
        for (uint64_t i = 0; i < b->a_len; i++)
            if (b->a[i] != input_value(0, i)) wrong++;
        break;
    case ALLGATHER: {
        uint64_t chunk = b->a_len;
        for (uint64_t j = 0; j < b->b_len; j++)
            if (b->b[j] != input_value((int)(j / chunk), j)) wrong++;
        break;
    }
    case REDUCESCATTER: {
        uint64_t chunk = b->b_len, first = (uint64_t)rank * chunk;
        for (uint64_t k = 0; k < chunk; k++)
            if (b->b[k] != base + (float)ranks * (float)((first + k) % 7)) wrong++;
        break;
    }
    }
    return wrong;
}

static void run_once(const struct options *o, struct bufs *b, int count_per_rank) {
    switch (o->coll) {
    case ALLREDUCE:
        if (b->b == NULL)
            MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, b->a, (int)b->a_len, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        else
            MPI_CHECK(MPI_Allreduce(b->a, b->b, (int)b->a_len, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        break;
    case BROADCAST:
        MPI_CHECK(MPI_Bcast(b->a, (int)b->a_len, MPI_FLOAT, 0, MPI_COMM_WORLD));
        break;
    case ALLGATHER:
        MPI_CHECK(MPI_Allgather(b->a, count_per_rank, MPI_FLOAT, b->b, count_per_rank, MPI_FLOAT,
                                MPI_COMM_WORLD));
        break;
    case REDUCESCATTER:
        MPI_CHECK(MPI_Reduce_scatter_block(b->a, b->b, count_per_rank, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        break;
    }
}

/* True when --funneled is among the arguments: the thread level must be chosen before MPI is
 * initialized, so before the options are parsed. */
static int wants_funneled(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--funneled") == 0) return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (wants_funneled(argc, argv)) {
        int provided = 0;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int ranks = 0;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &ranks));

    struct options o;
    int rc = parse_args(argc, argv, &o);
    if (rc != 0) {
        MPI_Finalize();
        return rc < 0 ? 0 : rc;
    }

    if (g_rank == 0 && o.header) {
        puts("collective,cadence,ranks,bytes,count,iters,warmup,in_place,time_us_avg,time_us_max,"
             "time_us_min,wrong");
        fflush(stdout);
    }

    /* Round to whole f32 elements and drop duplicates, like psybench's round_sizes. */
    int kept = 0;
    for (int s = 0; s < o.nsizes; s++) {
        uint64_t r = (o.sizes[s] + sizeof(float) - 1) / sizeof(float) * sizeof(float);
        if (kept == 0 || o.sizes[kept - 1] != r) o.sizes[kept++] = r;
    }
    o.nsizes = kept;

    const char *corrupt_env = getenv("MPI_COLL_BENCH_TEST_CORRUPT");
    int corrupt = corrupt_env != NULL && strcmp(corrupt_env, "1") == 0;

    uint64_t total_wrong = 0;
    for (int s = 0; s < o.nsizes; s++) {
        uint64_t count = element_count(o.coll, o.sizes[s], ranks);
        uint64_t bytes = count * sizeof(float);
        uint64_t warmup, iters;
        default_iters(bytes, &warmup, &iters);
        if (o.iters > 0) iters = o.iters;
        if (o.warmup_set) warmup = o.warmup;
        uint64_t per_rank = (o.coll == ALLGATHER || o.coll == REDUCESCATTER) ? count / (uint64_t)ranks : count;
        if (count > (uint64_t)INT32_MAX)
            die("size %llu bytes is %llu elements, more than one MPI call can carry (%d)",
                (unsigned long long)bytes, (unsigned long long)count, INT32_MAX);

        struct bufs b = {NULL, NULL, 0, 0};
        int in_place = 0;
        switch (o.coll) {
        case ALLREDUCE:
            b.a_len = count;
            b.a = alloc_floats(count, o.page_aligned, "all-reduce");
            if (o.out_of_place) {
                b.b_len = count;
                b.b = alloc_floats(count, o.page_aligned, "all-reduce receive");
            } else {
                in_place = 1;
            }
            break;
        case BROADCAST:
            b.a_len = count;
            b.a = alloc_floats(count, o.page_aligned, "broadcast");
            in_place = 1; /* one buffer, as psybench records it */
            break;
        case ALLGATHER:
            b.a_len = per_rank;
            b.a = alloc_floats(per_rank, o.page_aligned, "all-gather send");
            b.b_len = count;
            b.b = alloc_floats(count, o.page_aligned, "all-gather receive");
            break;
        case REDUCESCATTER:
            b.a_len = count;
            b.a = alloc_floats(count, o.page_aligned, "reduce-scatter send");
            b.b_len = per_rank;
            b.b = alloc_floats(per_rank, o.page_aligned, "reduce-scatter receive");
            break;
        }

        /* One checked run from fresh buffers, then fill again, warm up, and time. */
        fill(&o, &b, g_rank);
        run_once(&o, &b, (int)per_rank);
        if (corrupt && g_rank == 0) {
            /* Test-only: spoil one element of rank 0's result, to prove the check can fail. */
            float *result = b.b != NULL ? b.b : b.a;
            result[0] = -99.0f;
        }
        uint64_t wrong = count_wrong(&o, &b, g_rank, ranks);
        fill(&o, &b, g_rank);
        for (uint64_t i = 0; i < warmup; i++) run_once(&o, &b, (int)per_rank);

        double per_call = 0.0;
        if (o.cadence == STREAM) {
            MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
            double t0 = MPI_Wtime();
            for (uint64_t i = 0; i < iters; i++) run_once(&o, &b, (int)per_rank);
            per_call = (MPI_Wtime() - t0) / (double)iters;
        } else {
            double sum = 0.0;
            MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
            for (uint64_t i = 0; i < iters; i++) {
                double t0 = MPI_Wtime();
                run_once(&o, &b, (int)per_rank);
                sum += MPI_Wtime() - t0;
                MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
            }
            per_call = sum / (double)iters;
        }
        double us = per_call * 1e6, us_max = 0.0, us_min = 0.0, us_sum = 0.0;
        unsigned long long wrong_ull = wrong, wrong_all = 0;
        MPI_CHECK(MPI_Reduce(&us, &us_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Reduce(&us, &us_min, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Reduce(&us, &us_sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Reduce(&wrong_ull, &wrong_all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
        if (g_rank == 0) {
            printf("%s,%s,%d,%llu,%llu,%llu,%llu,%s,%.3f,%.3f,%.3f,%llu\n", COLL_NAMES[o.coll],
                   CADENCE_NAMES[o.cadence], ranks, (unsigned long long)bytes, (unsigned long long)count,
                   (unsigned long long)iters, (unsigned long long)warmup, in_place ? "true" : "false",
                   us_sum / ranks, us_max, us_min, wrong_all);
            fflush(stdout);
            total_wrong += wrong_all;
        }
        free(b.a);
        free(b.b);
    }
    if (g_rank == 0 && total_wrong > 0)
        fprintf(stderr, "mpi_coll_bench: %llu wrong elements (see the wrong column)\n",
                (unsigned long long)total_wrong);
    /* Every rank exits with the same status. */
    unsigned long long tw = total_wrong;
    MPI_CHECK(MPI_Bcast(&tw, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD));
    MPI_Finalize();
    return tw > 0 ? EXIT_WRONG : 0;
}

/*
 * fake_nvml.c - simulated NVIDIA hardware behind the NVML C API.
 *
 * Built as libnvidia-ml.so.1 and loaded by the unmodified nvidia-ml-py binding
 * (and by Ray's vendored copy of it). Everything the library answers comes from
 * a "state file" named by the environment variable RAY_ACCEL_FAKE_NVML_STATE,
 * read at each nvmlInit* and re-read whenever the file changes (checked at most
 * every 10 ms). exporter/simulate/nvml_state.py writes that file from a scenario
 * JSON; the JSON format is documented in docs/simulation.md.
 *
 * STATE FILE FORMAT (version 1)
 *
 * Plain text, one record per line, tokens separated by spaces; a line starts
 * with its key. Blank lines and lines starting with '#' are ignored.
 *
 *   fakenvml 1                 first line: format name and version
 *   epoch <unix seconds>       simulation time t = now - epoch
 *   freeze_at_s <s>            optional: t is fixed at <s>
 *   driver_version <text>      text = the rest of the line
 *   nvml_version <text>
 *   cuda_driver_version <int>
 *   errors <n>                 followed by n lines:
 *   error <function> <device|-1> <nvml code> <from_s> <until_s|inf>
 *   delays <n>                 followed by n lines:
 *   delay <function> <device|-1> <seconds> <from_s> <until_s|inf> [busy]
 *                              ("busy": the call spins on the CPU instead of sleeping)
 *   device <i>                 starts device i; devices come in order 0, 1, ...
 *   mig_devices <n>            the current device has n MIG devices, then:
 *   mig <j>                    starts MIG device j (0 .. n-1) of the current device
 *   <key> <value>              a key of the current device or MIG device
 *   end                        last line; a file without it is rejected
 *
 * A <function> matches a call when it equals the exported name, that name
 * without its _vN suffix, or "*"; every nvmlInit* entry point is "nvmlInit".
 * Rule windows are from_s <= t < until_s.
 *
 * Device values:
 *   string keys:   <text>      (name, uuid, serial, pci_bus_id)
 *   number keys:   <number>
 *   signal keys:   <number>    a constant, or
 *                  k <linear|step> <period_s, 0 = none> <n> <t1> <v1> ... <tn> <vn>
 *   counter keys:  <start> <signal>   value = floor(start + integral of the signal)
 * A key that is not given makes the NVML functions reading it answer
 * NVML_ERROR_NOT_SUPPORTED. Values are saturated to the NVML type's range and
 * percentages capped at 100, unless the device has "raw_values 1" (section
 * "Raw values"). Lists are announced by a count line, then items:
 *   processes <n>   process <pid> <1 compute|2 graphics|3 both> <used bytes> <sm%> <mem%> <enc%> <dec%> [live]
 *                   [sm_activity <%>] [window <from_s> <until_s|inf>]
 *                   ("live": listed only while a process with that pid exists;
 *                   "sm_activity": the SM activity GPM sees from it, default its sm%;
 *                   "window": listed only for from_s <= t < until_s)
 *   xid_events <n>  xid <at_s> <xid>
 *   nvlinks <n>     nvlink <active 0|1> <version> <remote device type> <remote pci bus id>
 *   fields <n>      field <id> <scope> <nvml value type> s <signal>
 *                   field <id> <scope> <nvml value type> c <start> <signal>
 * Single lines:
 *   cpu_affinity <cpu> ...
 *   topology <other device> <nvmlGpuTopologyLevel_t>
 *   p2p <other device|-1 for any> <read> <write> <nvlink> <atomics> <pci>   (status codes)
 *   fabric <state> <status> <clique id> <health mask> <health summary> <32 hex digits uuid>
 *                   state, status, health mask and summary are signals (step keyframes
 *                   let fabric health change mid-run); the uuid and clique id are fixed;
 *                   a trailing "v2": the driver knows only the v2 struct
 *   gpm <metric id> <signal>   a GPM metric's signal (percent, or MiB/s for bandwidths);
 *                              on a MIG device: its GPU instance's metric
 *   gpm_supported <0|1>        default: 1 from the Hopper architecture (9) on
 *
 * Concurrency: one mutex guards the loaded state and every computation on it.
 * Injected delays, the 20 ms PCIe sample and nvmlEventSetWait sleep without it.
 * Device handles are addresses of static slots, so they stay valid across
 * reloads; the data they name is looked up in the current state on each call.
 */
#define _GNU_SOURCE
#include "fake_nvml.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define NVML_API __attribute__((visibility("default")))

#define STATE_ENV "RAY_ACCEL_FAKE_NVML_STATE"
#define FORMAT_NAME "fakenvml"
#define FORMAT_VERSION 1
#define MAX_DEVICES 64
#define MAX_MIG 8
#define MAX_LIST 65536
#define MAX_KEYFRAMES 65536
#define CPU_WORDS 16 /* affinity masks cover CPUs 0..1023 */
#define STR_LEN 96
#define FN_LEN 96
#define RELOAD_CHECK_S 0.010
#define WAIT_STEP_S 0.020
#define PCIE_SAMPLE_S 0.020
#define ENCODER_SAMPLING_US 167000u
#define PROCESS_SAMPLING_US 167000ull /* how often the driver samples per-process use */
#define DEFAULT_MAX_MIG_DEVICES 7

_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t layout");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t layout");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t layout");
_Static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32, "sample layout");
_Static_assert(sizeof(nvmlProcessUtilizationInfo_v1_t) == 40, "util info layout");
_Static_assert(sizeof(nvmlProcessesUtilizationInfo_t) == 24, "utils info layout");
_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t layout");
_Static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t layout");
_Static_assert(sizeof(nvmlGpuFabricInfo_t) == 28, "nvmlGpuFabricInfo_t layout");
_Static_assert(offsetof(nvmlGpuFabricInfoV_t, healthSummary) == 36, "fabric v3 layout");
_Static_assert(sizeof(nvmlBAR1Memory_t) == 24, "nvmlBAR1Memory_t layout");
_Static_assert(sizeof(nvmlTemperature_t) == 12, "nvmlTemperature_t layout");
_Static_assert(sizeof(nvmlConfComputeMemSizeInfo_t) == 16, "nvmlConfComputeMemSizeInfo_t layout");
_Static_assert(sizeof(nvmlViolationTime_t) == 16, "nvmlViolationTime_t layout");

/* ------------------------------------------------------------------------ */
/* Arena: every allocation of one loaded state, freed together.             */
/* ------------------------------------------------------------------------ */

typedef struct arena_block {
    struct arena_block *next;
    size_t used;
    size_t cap;
    unsigned char data[] __attribute__((aligned(16)));
} arena_block;

typedef struct {
    arena_block *head;
} arena_t;

/* Zeroed, 16-byte aligned memory that lives until arena_free. */
static void *arena_alloc(arena_t *a, size_t n)
{
    if (n > ((size_t)1 << 30))
        return NULL;
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        arena_block *b = calloc(1, sizeof *b + cap);
        if (!b)
            return NULL;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    return p;
}

static void arena_free(arena_t *a)
{
    arena_block *b = a->head;
    while (b) {
        arena_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
}

/* ------------------------------------------------------------------------ */
/* Data model                                                               */
/* ------------------------------------------------------------------------ */

typedef struct {
    double t;
    double v;
} keyframe_t;

typedef struct {
    int present;
    double constant; /* the value when nkf == 0 */
    int step;        /* 1: hold each keyframe's value; 0: interpolate linearly */
    double period;   /* > 0: the curve repeats; wrap points are added at parse */
    int nkf;
    keyframe_t *kf;
} signal_t;

typedef struct {
    int present;
    double start;
    signal_t rate;
} counter_t;

typedef struct {
    int present;
    double v;
} num_t;

typedef struct {
    int present;
    char s[STR_LEN];
} str_t;

/* A counted list whose items live in the state's arena. */
typedef struct {
    int present;
    int n;
    int cap;
    void *items;
} list_t;

#define PROC_COMPUTE 1u
#define PROC_GRAPHICS 2u

typedef struct {
    unsigned int pid;
    unsigned int types;
    double used_bytes;
    unsigned int sm, mem, enc, dec;
    int live; /* shown only while the pid exists: a simulated context of a real process */
    int sm_activity_set; /* GPM: the SM activity it adds, when not its sm% (a spinning kernel) */
    double sm_activity;
    double from_s, until_s; /* listed only for from_s <= t < until_s (a recorded process) */
} proc_t;

static double scenario_now(void);

static int proc_visible(const proc_t *p)
{
    if (p->from_s > 0 || p->until_s < __builtin_inf()) {
        double t = scenario_now();
        if (t < p->from_s || t >= p->until_s)
            return 0;
    }
    return !p->live || kill((pid_t)p->pid, 0) == 0 || errno == EPERM;
}

typedef struct {
    double at_s;
    unsigned int xid;
} xid_t;

typedef struct {
    unsigned int active;
    unsigned int version;
    unsigned int remote_type;
    char remote_bus[STR_LEN];
} nvlink_t;

typedef struct {
    unsigned int id;
    unsigned int scope;
    unsigned int value_type;
    int is_counter;
    signal_t sig;  /* when !is_counter */
    counter_t ctr; /* when is_counter */
} field_t;

typedef struct fake_dev {
    str_t name, uuid, serial, pci_bus_id;
    num_t pci_device_id, pci_subsystem_id, minor_number, architecture;
    num_t memory_total, memory_reserved;
    signal_t memory_used;
    signal_t util_gpu, util_memory, encoder, decoder;
    signal_t power;
    num_t power_limit, energy_start;
    signal_t temperature;
    signal_t clock[NVML_CLOCK_COUNT];
    num_t max_clock[NVML_CLOCK_COUNT];
    signal_t clocks_event_reasons, pstate;
    num_t ecc_mode;
    num_t load_from_processes; /* add the processes' memory and engine use to the device's */
    num_t raw_values; /* answer values exactly as given (section "Raw values") */
    counter_t ecc[2]; /* corrected, uncorrected */
    num_t remapped[4]; /* correctable, uncorrectable, pending, failure */
    num_t retired[2];  /* multiple single bit, double bit */
    num_t retired_pending;
    counter_t pcie_replay;
    num_t lost_at;
    num_t mig_mode, mig_max, gpu_instance_id, compute_instance_id;
    num_t pcie_gen_current, pcie_gen_max, pcie_gen_gpu_max;
    num_t pcie_width_current, pcie_width_max;
    signal_t pcie_tx, pcie_rx;
    num_t numa_node;
    int cpu_present;
    unsigned long long cpu_mask[CPU_WORDS];
    int topo_present;
    unsigned char topo_set[MAX_DEVICES];
    unsigned int topo[MAX_DEVICES];
    unsigned char p2p_set[MAX_DEVICES];
    unsigned int p2p[MAX_DEVICES][NVML_P2P_CAPS_INDEX_COUNT];
    int p2p_any_set;
    unsigned int p2p_any[NVML_P2P_CAPS_INDEX_COUNT];
    int fabric_present;
    int fabric_v2_only; /* a driver that knows only the v2 struct (no health summary) */
    unsigned char fabric_uuid[NVML_GPU_FABRIC_UUID_LEN];
    unsigned int fabric_clique;
    signal_t fabric_state, fabric_status, fabric_health_mask, fabric_health_summary;
    /* Board facts other monitoring tools read (section "Board facts" below) */
    str_t board_part_number, vbios_version;
    num_t bar1_total;
    signal_t bar1_used;
    num_t fan_count;
    signal_t fan_speed;
    num_t persistence_mode, compute_mode, display_mode, display_active, driver_model;
    num_t cc_major, cc_minor, brand;
    num_t conf_protected_kib, conf_unprotected_kib;
    num_t power_limit_min, power_limit_max, power_limit_default;
    num_t gpu_cores, memory_bus_width;
    list_t procs;   /* proc_t */
    list_t xids;    /* xid_t */
    list_t nvlinks; /* nvlink_t */
    list_t fields;  /* field_t */
    list_t migs;    /* struct fake_dev */
    num_t gpm_supported;
    signal_t *gpm; /* NVML_GPM_METRIC_MAX signals by metric id; NULL: none given */
} fake_dev;

typedef struct {
    char fn[FN_LEN];
    int device; /* -1: every device and the global functions */
    int code;
    double seconds;
    double from_s;
    double until_s;
    int busy; /* delays: spend the time on the CPU, as some real driver calls do */
} rule_t;

typedef struct {
    arena_t arena;
    double epoch;
    int frozen;
    double freeze_at;
    str_t driver_version, nvml_version;
    num_t cuda_version;
    int ndev;
    fake_dev devs[MAX_DEVICES];
    list_t errors; /* rule_t */
    list_t delays; /* rule_t */
} fake_state;

/* Scalar device keys of the state file and where they are stored. */
typedef enum { KT_STR, KT_NUM, KT_SIG, KT_CTR } key_type;

typedef struct {
    const char *key;
    key_type type;
    size_t offset;
} key_spec;

#define KEY(k, t, member) {k, t, offsetof(fake_dev, member)}

static const key_spec DEVICE_KEYS[] = {
    KEY("name", KT_STR, name),
    KEY("uuid", KT_STR, uuid),
    KEY("serial", KT_STR, serial),
    KEY("pci_bus_id", KT_STR, pci_bus_id),
    KEY("pci_device_id", KT_NUM, pci_device_id),
    KEY("pci_subsystem_id", KT_NUM, pci_subsystem_id),
    KEY("minor_number", KT_NUM, minor_number),
    KEY("architecture", KT_NUM, architecture),
    KEY("memory_total_bytes", KT_NUM, memory_total),
    KEY("memory_reserved_bytes", KT_NUM, memory_reserved),
    KEY("memory_used_bytes", KT_SIG, memory_used),
    KEY("load_from_processes", KT_NUM, load_from_processes),
    KEY("raw_values", KT_NUM, raw_values),
    KEY("utilization_gpu_percent", KT_SIG, util_gpu),
    KEY("utilization_memory_percent", KT_SIG, util_memory),
    KEY("encoder_percent", KT_SIG, encoder),
    KEY("decoder_percent", KT_SIG, decoder),
    KEY("power_mw", KT_SIG, power),
    KEY("power_limit_mw", KT_NUM, power_limit),
    KEY("energy_start_mj", KT_NUM, energy_start),
    KEY("temperature_c", KT_SIG, temperature),
    KEY("clock_graphics_mhz", KT_SIG, clock[NVML_CLOCK_GRAPHICS]),
    KEY("clock_sm_mhz", KT_SIG, clock[NVML_CLOCK_SM]),
    KEY("clock_memory_mhz", KT_SIG, clock[NVML_CLOCK_MEM]),
    KEY("clock_video_mhz", KT_SIG, clock[NVML_CLOCK_VIDEO]),
    KEY("max_clock_graphics_mhz", KT_NUM, max_clock[NVML_CLOCK_GRAPHICS]),
    KEY("max_clock_sm_mhz", KT_NUM, max_clock[NVML_CLOCK_SM]),
    KEY("max_clock_memory_mhz", KT_NUM, max_clock[NVML_CLOCK_MEM]),
    KEY("max_clock_video_mhz", KT_NUM, max_clock[NVML_CLOCK_VIDEO]),
    KEY("clocks_event_reasons", KT_SIG, clocks_event_reasons),
    KEY("performance_state", KT_SIG, pstate),
    KEY("ecc_mode", KT_NUM, ecc_mode),
    KEY("ecc_corrected", KT_CTR, ecc[0]),
    KEY("ecc_uncorrected", KT_CTR, ecc[1]),
    KEY("remapped_correctable", KT_NUM, remapped[0]),
    KEY("remapped_uncorrectable", KT_NUM, remapped[1]),
    KEY("remapped_pending", KT_NUM, remapped[2]),
    KEY("remapped_failure", KT_NUM, remapped[3]),
    KEY("retired_single_bit", KT_NUM, retired[0]),
    KEY("retired_double_bit", KT_NUM, retired[1]),
    KEY("retired_pending", KT_NUM, retired_pending),
    KEY("pcie_replay", KT_CTR, pcie_replay),
    KEY("lost_at_s", KT_NUM, lost_at),
    KEY("mig_mode", KT_NUM, mig_mode),
    KEY("mig_max_devices", KT_NUM, mig_max),
    KEY("gpu_instance_id", KT_NUM, gpu_instance_id),
    KEY("compute_instance_id", KT_NUM, compute_instance_id),
    KEY("pcie_gen_current", KT_NUM, pcie_gen_current),
    KEY("pcie_gen_max", KT_NUM, pcie_gen_max),
    KEY("pcie_gen_gpu_max", KT_NUM, pcie_gen_gpu_max),
    KEY("pcie_width_current", KT_NUM, pcie_width_current),
    KEY("pcie_width_max", KT_NUM, pcie_width_max),
    KEY("pcie_tx_kbps", KT_SIG, pcie_tx),
    KEY("pcie_rx_kbps", KT_SIG, pcie_rx),
    KEY("numa_node", KT_NUM, numa_node),
    KEY("board_part_number", KT_STR, board_part_number),
    KEY("vbios_version", KT_STR, vbios_version),
    KEY("bar1_total_bytes", KT_NUM, bar1_total),
    KEY("bar1_used_bytes", KT_SIG, bar1_used),
    KEY("fan_count", KT_NUM, fan_count),
    KEY("fan_speed_percent", KT_SIG, fan_speed),
    KEY("persistence_mode", KT_NUM, persistence_mode),
    KEY("compute_mode", KT_NUM, compute_mode),
    KEY("display_mode", KT_NUM, display_mode),
    KEY("display_active", KT_NUM, display_active),
    KEY("driver_model", KT_NUM, driver_model),
    KEY("cuda_cc_major", KT_NUM, cc_major),
    KEY("cuda_cc_minor", KT_NUM, cc_minor),
    KEY("brand", KT_NUM, brand),
    KEY("conf_compute_protected_kib", KT_NUM, conf_protected_kib),
    KEY("conf_compute_unprotected_kib", KT_NUM, conf_unprotected_kib),
    KEY("power_limit_min_mw", KT_NUM, power_limit_min),
    KEY("power_limit_max_mw", KT_NUM, power_limit_max),
    KEY("power_limit_default_mw", KT_NUM, power_limit_default),
    KEY("gpu_cores", KT_NUM, gpu_cores),
    KEY("memory_bus_width_bits", KT_NUM, memory_bus_width),
    KEY("gpm_supported", KT_NUM, gpm_supported),
};

/* ------------------------------------------------------------------------ */
/* Numbers and time                                                         */
/* ------------------------------------------------------------------------ */

static double clock_seconds(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double realtime_now(void) { return clock_seconds(CLOCK_REALTIME); }
static double mono_now(void) { return clock_seconds(CLOCK_MONOTONIC); }

static double state_time(const fake_state *s)
{
    return s->frozen ? s->freeze_at : realtime_now() - s->epoch;
}

/* floor() without libm; valid well beyond the magnitudes used here. */
static double dfloor(double x)
{
    if (x >= 9.0e18 || x <= -9.0e18)
        return x;
    double i = (double)(long long)x;
    return i > x ? i - 1.0 : i;
}

/* x modulo p, in [0, p). */
static double pos_mod(double x, double p)
{
    double r = x - p * dfloor(x / p);
    return (r < 0 || r >= p) ? 0.0 : r;
}

/* Conversions to integers saturate: a double out of range must never reach a cast. */
static long long to_ll(double v)
{
    if (!(v - v == 0))
        return v > 0 ? LLONG_MAX : (v < 0 ? LLONG_MIN : 0);
    if (v >= 9.2e18)
        return LLONG_MAX;
    if (v <= -9.2e18)
        return LLONG_MIN;
    return (long long)(v < 0 ? v - 0.5 : v + 0.5);
}

static int to_int(double v)
{
    long long n = to_ll(v);
    return n > INT_MAX ? INT_MAX : (n < INT_MIN ? INT_MIN : (int)n);
}

static unsigned int to_uint(double v)
{
    if (!(v > 0))
        return 0;
    if (v >= 4294967295.0)
        return UINT_MAX;
    return (unsigned int)(v + 0.5);
}

static unsigned long long to_ull(double v)
{
    if (!(v > 0))
        return 0;
    if (v >= 1.8e19)
        return ULLONG_MAX;
    return (unsigned long long)(v + 0.5);
}

/* ------------------------------------------------------------------------ */
/* Raw values                                                               */
/* ------------------------------------------------------------------------ */

/* A device with raw_values answers what its scenario asks the way a driver
 * with a firmware bug or a wrapped counter would: percentages are not capped
 * at 100, and a value outside the unsigned NVML type is converted as C
 * converts an integer, modulo 2^32 or 2^64 (power -50000 mW reads 4294917296).
 * Other devices saturate to the type's range and cap percentages at 100. */
static int raw_values(const fake_dev *d)
{
    return d->raw_values.present && d->raw_values.v != 0;
}

static unsigned int dev_uint(const fake_dev *d, double v)
{
    if (!raw_values(d))
        return to_uint(v);
    return (unsigned int)((unsigned long long)to_ll(v) & 0xFFFFFFFFull);
}

static unsigned long long dev_ull(const fake_dev *d, double v)
{
    return raw_values(d) ? (unsigned long long)to_ll(v) : to_ull(v);
}

static double dev_percent(const fake_dev *d, double percent)
{
    return raw_values(d) || percent <= 100.0 ? percent : 100.0;
}
/* ----------------------------- end of Raw values ------------------------ */

/* Microseconds since the Unix epoch at simulation time t. */
static long long state_unix_us(const fake_state *s, double t)
{
    return to_ll((s->epoch + t) * 1e6);
}

static void sleep_seconds(double s)
{
    if (!(s > 0))
        return;
    if (s > 1e7)
        s = 1e7;
    struct timespec req;
    req.tv_sec = (time_t)s;
    req.tv_nsec = (long)((s - (double)req.tv_sec) * 1e9);
    if (req.tv_nsec < 0 || req.tv_nsec > 999999999)
        req.tv_nsec = 0;
    while (nanosleep(&req, &req) != 0 && errno == EINTR) {
    }
}

/* Spends s seconds of this thread's CPU time. */
static void spin_seconds(double s)
{
    struct timespec now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    double end = (double)now.tv_sec + (double)now.tv_nsec / 1e9 + s;
    volatile unsigned long spins = 0;
    do {
        for (int i = 0; i < 1000; i++)
            spins++;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    } while ((double)now.tv_sec + (double)now.tv_nsec / 1e9 < end);
}

/* Waits out a delay rule (a copy: the state may be reloaded meanwhile). */
static void pass_delay(const rule_t *r)
{
    if (r->busy)
        spin_seconds(r->seconds);
    else
        sleep_seconds(r->seconds);
}

/* ------------------------------------------------------------------------ */
/* Signals and counters                                                     */
/* ------------------------------------------------------------------------ */

/* Value of a keyframe curve at x, holding the end values outside it. */
static double curve_at(const keyframe_t *k, int n, int step, double x)
{
    if (n == 1 || x < k[0].t)
        return k[0].v;
    if (x >= k[n - 1].t)
        return k[n - 1].v;
    int lo = 0, hi = n - 1; /* invariant: k[lo].t <= x < k[hi].t */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (k[mid].t <= x)
            lo = mid;
        else
            hi = mid;
    }
    double dt = k[hi].t - k[lo].t;
    if (step || dt <= 0)
        return k[lo].v;
    return k[lo].v + (k[hi].v - k[lo].v) * (x - k[lo].t) / dt;
}

/* Integral of a keyframe curve over [a, b], a <= b. */
static double curve_integral(const keyframe_t *k, int n, int step, double a, double b)
{
    double total = 0.0;
    if (a < k[0].t)
        total += k[0].v * ((b < k[0].t ? b : k[0].t) - a);
    if (b > k[n - 1].t)
        total += k[n - 1].v * (b - (a > k[n - 1].t ? a : k[n - 1].t));
    for (int i = 0; i + 1 < n; i++) {
        double t0 = k[i].t, t1 = k[i + 1].t;
        double lo = a > t0 ? a : t0, hi = b < t1 ? b : t1;
        if (hi <= lo)
            continue;
        if (step) {
            total += k[i].v * (hi - lo);
        } else {
            double slope = (k[i + 1].v - k[i].v) / (t1 - t0);
            double vlo = k[i].v + slope * (lo - t0), vhi = k[i].v + slope * (hi - t0);
            total += 0.5 * (vlo + vhi) * (hi - lo);
        }
    }
    return total;
}

static double sig_value(const signal_t *s, double t)
{
    if (s->nkf == 0)
        return s->constant;
    double x = s->period > 0 ? pos_mod(t, s->period) : t;
    return curve_at(s->kf, s->nkf, s->step, x);
}

/* Integral of the signal from 0 to t (0 for t <= 0). */
static double sig_integral(const signal_t *s, double t)
{
    if (!(t > 0))
        return 0.0;
    if (s->nkf == 0)
        return s->constant * t;
    if (s->period <= 0)
        return curve_integral(s->kf, s->nkf, s->step, 0.0, t);
    double cycles = dfloor(t / s->period);
    double rest = t - cycles * s->period;
    double per_cycle = curve_integral(s->kf, s->nkf, s->step, 0.0, s->period);
    return cycles * per_cycle + curve_integral(s->kf, s->nkf, s->step, 0.0, rest);
}

static double ctr_value(const counter_t *c, double t)
{
    return dfloor(c->start + sig_integral(&c->rate, t));
}

/* ------------------------------------------------------------------------ */
/* State file parser                                                        */
/* ------------------------------------------------------------------------ */

typedef struct {
    fake_state *st;
    fake_dev *dev; /* device or MIG device that keys apply to; NULL before "device" */
    fake_dev *phys;
    int saw_end;
    const char *why;
} parser_t;

/* Splits the next space-separated token off *cur, in place. */
static char *next_tok(char **cur)
{
    char *p = *cur;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '\0') {
        *cur = p;
        return NULL;
    }
    char *start = p;
    while (*p && *p != ' ' && *p != '\t')
        p++;
    if (*p)
        *p++ = '\0';
    *cur = p;
    return start;
}

/* A finite number; with allow_inf, also the token "inf". */
static int number_text(const char *tok, int allow_inf, double *out)
{
    char *end;
    if (!tok)
        return -1;
    if (allow_inf && strcmp(tok, "inf") == 0) {
        *out = __builtin_inf();
        return 0;
    }
    errno = 0;
    double v = strtod(tok, &end);
    if (*end != '\0' || errno == ERANGE || !(v - v == 0)) /* rejects NaN and infinities */
        return -1;
    *out = v;
    return 0;
}

static int tok_number(char **cur, int allow_inf, double *out)
{
    return number_text(next_tok(cur), allow_inf, out);
}

static int tok_num(char **cur, double *out) { return tok_number(cur, 0, out); }

static int tok_int(char **cur, long long lo, long long hi, long long *out)
{
    char *tok = next_tok(cur), *end;
    if (!tok)
        return -1;
    errno = 0;
    long long v = strtoll(tok, &end, 10);
    if (*end != '\0' || errno == ERANGE || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int tok_uint(char **cur, unsigned int *out)
{
    long long v;
    if (tok_int(cur, 0, UINT_MAX, &v) != 0)
        return -1;
    *out = (unsigned int)v;
    return 0;
}

static int at_line_end(char **cur)
{
    return next_tok(cur) == NULL;
}

static int copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n + 1 > cap)
        return -1;
    memcpy(dst, src, n + 1);
    return 0;
}

/* Periodic curves get the last point repeated one period earlier and the first
 * one a period later, so that every x in [0, period) lies inside the curve. */
static int parse_keyframes(parser_t *p, char **cur, signal_t *s)
{
    char *mode = next_tok(cur);
    long long n;
    double period;
    if (!mode || (strcmp(mode, "linear") != 0 && strcmp(mode, "step") != 0))
        return p->why = "keyframes: expected linear or step", -1;
    if (tok_num(cur, &period) != 0 || period < 0)
        return p->why = "keyframes: bad period", -1;
    if (tok_int(cur, 1, MAX_KEYFRAMES, &n) != 0)
        return p->why = "keyframes: bad count", -1;
    int total = (int)n + (period > 0 ? 2 : 0);
    keyframe_t *kf = arena_alloc(&p->st->arena, sizeof *kf * (size_t)total);
    if (!kf)
        return p->why = "out of memory", -1;
    keyframe_t *user = kf + (period > 0 ? 1 : 0);
    for (int i = 0; i < n; i++) {
        if (tok_num(cur, &user[i].t) != 0 || tok_num(cur, &user[i].v) != 0)
            return p->why = "keyframes: bad point", -1;
        if (i > 0 && user[i].t < user[i - 1].t)
            return p->why = "keyframes: times must not decrease", -1;
    }
    if (period > 0) {
        if (user[0].t < 0 || user[n - 1].t > period)
            return p->why = "keyframes: times must lie in [0, period]", -1;
        kf[0].t = user[n - 1].t - period;
        kf[0].v = user[n - 1].v;
        kf[total - 1].t = user[0].t + period;
        kf[total - 1].v = user[0].v;
    }
    s->step = mode[0] == 's';
    s->period = period;
    s->nkf = total;
    s->kf = kf;
    return 0;
}

static int parse_signal(parser_t *p, char **cur, signal_t *s)
{
    memset(s, 0, sizeof *s);
    char *tok = next_tok(cur);
    if (!tok)
        return p->why = "missing signal", -1;
    if (strcmp(tok, "k") == 0) {
        if (parse_keyframes(p, cur, s) != 0)
            return -1;
    } else if (number_text(tok, 0, &s->constant) != 0) { /* tok is split off: parse it here */
        return p->why = "bad number", -1;
    }
    s->present = 1;
    return 0;
}

static int parse_counter(parser_t *p, char **cur, counter_t *c)
{
    memset(c, 0, sizeof *c);
    if (tok_num(cur, &c->start) != 0)
        return p->why = "counter: bad start", -1;
    if (parse_signal(p, cur, &c->rate) != 0)
        return -1;
    c->present = 1;
    return 0;
}

/* "<key> <n>": reserves n items for the lines that follow. */
static int parse_list_count(parser_t *p, char **cur, list_t *l, size_t item_size, int max)
{
    long long n;
    if (tok_int(cur, 0, max, &n) != 0)
        return p->why = "bad list count", -1;
    if (l->present)
        return p->why = "list given twice", -1;
    l->items = arena_alloc(&p->st->arena, item_size * (size_t)(n > 0 ? n : 1));
    if (!l->items)
        return p->why = "out of memory", -1;
    l->present = 1;
    l->cap = (int)n;
    l->n = 0;
    return 0;
}

static void *list_next(parser_t *p, list_t *l, size_t item_size)
{
    if (!l->present || l->n >= l->cap) {
        p->why = "more list items than announced";
        return NULL;
    }
    return (char *)l->items + item_size * (size_t)l->n++;
}

static int parse_device_key(parser_t *p, const key_spec *k, char **cur)
{
    void *field = (char *)p->dev + k->offset;
    switch (k->type) {
    case KT_STR: {
        str_t *s = field;
        while (**cur == ' ')
            (*cur)++;
        if (copy_str(s->s, sizeof s->s, *cur) != 0)
            return p->why = "string too long", -1;
        s->present = 1;
        return 0;
    }
    case KT_NUM: {
        num_t *n = field;
        if (tok_num(cur, &n->v) != 0)
            return p->why = "bad number", -1;
        n->present = 1;
        return 0;
    }
    case KT_SIG:
        return parse_signal(p, cur, field);
    case KT_CTR:
        return parse_counter(p, cur, field);
    }
    return -1;
}

static int parse_process(parser_t *p, char **cur)
{
    proc_t *pr = list_next(p, &p->dev->procs, sizeof *pr);
    if (!pr)
        return -1;
    if (tok_uint(cur, &pr->pid) || tok_uint(cur, &pr->types) || tok_num(cur, &pr->used_bytes) ||
        tok_uint(cur, &pr->sm) || tok_uint(cur, &pr->mem) || tok_uint(cur, &pr->enc) ||
        tok_uint(cur, &pr->dec))
        return p->why = "bad process line", -1;
    while (**cur == ' ')
        (*cur)++;
    if (strncmp(*cur, "live", 4) == 0) {
        pr->live = 1;
        *cur += 4;
    }
    while (**cur == ' ')
        (*cur)++;
    if (strncmp(*cur, "sm_activity ", 12) == 0) {
        *cur += 12;
        if (tok_num(cur, &pr->sm_activity) != 0)
            return p->why = "bad process sm_activity", -1;
        pr->sm_activity_set = 1;
    }
    pr->until_s = __builtin_inf();
    while (**cur == ' ')
        (*cur)++;
    if (strncmp(*cur, "window ", 7) == 0) {
        *cur += 7;
        if (tok_num(cur, &pr->from_s) != 0 || tok_number(cur, 1, &pr->until_s) != 0)
            return p->why = "bad process window", -1;
    }
    return 0;
}

static int parse_xid(parser_t *p, char **cur)
{
    xid_t *x = list_next(p, &p->dev->xids, sizeof *x);
    if (!x)
        return -1;
    if (tok_num(cur, &x->at_s) || tok_uint(cur, &x->xid))
        return p->why = "bad xid line", -1;
    return 0;
}

static int parse_nvlink(parser_t *p, char **cur)
{
    nvlink_t *l = list_next(p, &p->dev->nvlinks, sizeof *l);
    if (!l)
        return -1;
    if (tok_uint(cur, &l->active) || tok_uint(cur, &l->version) || tok_uint(cur, &l->remote_type))
        return p->why = "bad nvlink line", -1;
    char *bus = next_tok(cur);
    if (!bus || copy_str(l->remote_bus, sizeof l->remote_bus, bus) != 0)
        return p->why = "bad nvlink remote bus id", -1;
    return 0;
}

static int parse_field(parser_t *p, char **cur)
{
    field_t *f = list_next(p, &p->dev->fields, sizeof *f);
    if (!f)
        return -1;
    if (tok_uint(cur, &f->id) || tok_uint(cur, &f->scope) || tok_uint(cur, &f->value_type) ||
        f->value_type >= NVML_VALUE_TYPE_COUNT)
        return p->why = "bad field line", -1;
    char *kind = next_tok(cur);
    if (kind && strcmp(kind, "c") == 0) {
        f->is_counter = 1;
        return parse_counter(p, cur, &f->ctr);
    }
    if (kind && strcmp(kind, "s") == 0)
        return parse_signal(p, cur, &f->sig);
    return p->why = "field: expected s or c", -1;
}

static int parse_cpu_affinity(parser_t *p, char **cur)
{
    unsigned int cpu;
    while (**cur) {
        if (tok_uint(cur, &cpu) != 0 || cpu >= CPU_WORDS * 64)
            return p->why = "bad cpu id", -1;
        p->dev->cpu_mask[cpu / 64] |= 1ULL << (cpu % 64);
        while (**cur == ' ')
            (*cur)++;
    }
    p->dev->cpu_present = 1;
    return 0;
}

static int parse_topology(parser_t *p, char **cur)
{
    long long other;
    unsigned int level;
    if (tok_int(cur, 0, MAX_DEVICES - 1, &other) || tok_uint(cur, &level))
        return p->why = "bad topology line", -1;
    p->dev->topo_present = 1;
    p->dev->topo_set[other] = 1;
    p->dev->topo[other] = level;
    return 0;
}

static int parse_p2p(parser_t *p, char **cur)
{
    long long other;
    unsigned int status[NVML_P2P_CAPS_INDEX_COUNT];
    if (tok_int(cur, -1, MAX_DEVICES - 1, &other) != 0)
        return p->why = "bad p2p device", -1;
    for (int i = 0; i < NVML_P2P_CAPS_INDEX_COUNT; i++)
        if (tok_uint(cur, &status[i]) != 0)
            return p->why = "bad p2p status", -1;
    unsigned int *dst = other < 0 ? p->dev->p2p_any : p->dev->p2p[other];
    memcpy(dst, status, sizeof status);
    if (other < 0)
        p->dev->p2p_any_set = 1;
    else
        p->dev->p2p_set[other] = 1;
    return 0;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int parse_fabric(parser_t *p, char **cur)
{
    fake_dev *d = p->dev;
    if (parse_signal(p, cur, &d->fabric_state) || parse_signal(p, cur, &d->fabric_status) ||
        tok_uint(cur, &d->fabric_clique) || parse_signal(p, cur, &d->fabric_health_mask) ||
        parse_signal(p, cur, &d->fabric_health_summary))
        return p->why = "bad fabric line", -1;
    char *hex = next_tok(cur);
    if (!hex || strlen(hex) != 2 * NVML_GPU_FABRIC_UUID_LEN)
        return p->why = "fabric: uuid must be 32 hex digits", -1;
    for (int i = 0; i < NVML_GPU_FABRIC_UUID_LEN; i++) {
        int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return p->why = "fabric: uuid must be 32 hex digits", -1;
        d->fabric_uuid[i] = (unsigned char)(hi * 16 + lo);
    }
    char *version = next_tok(cur);
    if (version && strcmp(version, "v2") != 0)
        return p->why = "fabric: after the uuid only \"v2\" may follow", -1;
    d->fabric_v2_only = version != NULL;
    d->fabric_present = 1;
    return 0;
}

static int parse_rule(parser_t *p, char **cur, list_t *rules, int is_delay)
{
    rule_t *r = list_next(p, rules, sizeof *r);
    if (!r)
        return -1;
    char *fn = next_tok(cur);
    long long device;
    if (!fn || copy_str(r->fn, sizeof r->fn, fn) != 0)
        return p->why = "rule: bad function", -1;
    if (tok_int(cur, -1, MAX_DEVICES - 1, &device) != 0)
        return p->why = "rule: bad device", -1;
    r->device = (int)device;
    if (is_delay) {
        if (tok_num(cur, &r->seconds) != 0 || r->seconds < 0)
            return p->why = "rule: bad seconds", -1;
    } else {
        long long code;
        if (tok_int(cur, 1, INT_MAX, &code) != 0)
            return p->why = "rule: bad code", -1;
        r->code = (int)code;
    }
    if (tok_num(cur, &r->from_s) != 0 || tok_number(cur, 1, &r->until_s) != 0)
        return p->why = "rule: bad time window", -1;
    if (is_delay) {
        char *flag = next_tok(cur);
        if (flag && strcmp(flag, "busy") != 0)
            return p->why = "rule: unknown delay flag", -1;
        r->busy = flag != NULL;
    }
    return 0;
}

static int parse_device_start(parser_t *p, char **cur)
{
    long long index;
    if (tok_int(cur, 0, MAX_DEVICES - 1, &index) != 0 || index != p->st->ndev)
        return p->why = "devices must be numbered 0, 1, 2, ... in order", -1;
    p->dev = p->phys = &p->st->devs[p->st->ndev++];
    return 0;
}

static int parse_mig_start(parser_t *p, char **cur)
{
    long long index;
    if (!p->phys)
        return p->why = "mig before device", -1;
    list_t *migs = &p->phys->migs;
    if (tok_int(cur, 0, MAX_MIG - 1, &index) != 0 || index != migs->n)
        return p->why = "MIG devices must be numbered 0, 1, 2, ... in order", -1;
    p->dev = list_next(p, migs, sizeof(fake_dev));
    return p->dev ? 0 : -1;
}

static int parse_global_num(parser_t *p, char **cur, num_t *n)
{
    if (tok_num(cur, &n->v) != 0)
        return p->why = "bad number", -1;
    n->present = 1;
    return 0;
}

static int parse_global_str(parser_t *p, char **cur, str_t *s)
{
    while (**cur == ' ')
        (*cur)++;
    if (copy_str(s->s, sizeof s->s, *cur) != 0)
        return p->why = "string too long", -1;
    s->present = 1;
    return 0;
}

static int parse_gpm(parser_t *p, char **cur); /* in the GPM section */

/* Records that are not scalar device keys; *handled is 0 if key is unknown. */
static int parse_special(parser_t *p, const char *key, char **cur, int *handled)
{
    fake_state *st = p->st;
    *handled = 1;
    if (strcmp(key, "epoch") == 0)
        return tok_num(cur, &st->epoch) ? (p->why = "bad epoch", -1) : 0;
    if (strcmp(key, "freeze_at_s") == 0) {
        st->frozen = 1;
        return tok_num(cur, &st->freeze_at) ? (p->why = "bad freeze_at_s", -1) : 0;
    }
    if (strcmp(key, "driver_version") == 0)
        return parse_global_str(p, cur, &st->driver_version);
    if (strcmp(key, "nvml_version") == 0)
        return parse_global_str(p, cur, &st->nvml_version);
    if (strcmp(key, "cuda_driver_version") == 0)
        return parse_global_num(p, cur, &st->cuda_version);
    if (strcmp(key, "errors") == 0)
        return parse_list_count(p, cur, &st->errors, sizeof(rule_t), MAX_LIST);
    if (strcmp(key, "delays") == 0)
        return parse_list_count(p, cur, &st->delays, sizeof(rule_t), MAX_LIST);
    if (strcmp(key, "error") == 0)
        return parse_rule(p, cur, &st->errors, 0);
    if (strcmp(key, "delay") == 0)
        return parse_rule(p, cur, &st->delays, 1);
    if (strcmp(key, "device") == 0)
        return parse_device_start(p, cur);
    if (strcmp(key, "mig") == 0)
        return parse_mig_start(p, cur);
    if (strcmp(key, "end") == 0) {
        p->saw_end = 1;
        return 0;
    }
    if (!p->dev) {
        *handled = 0;
        return 0;
    }
    fake_dev *d = p->dev;
    if (strcmp(key, "mig_devices") == 0)
        return parse_list_count(p, cur, &d->migs, sizeof(fake_dev), MAX_MIG);
    if (strcmp(key, "processes") == 0)
        return parse_list_count(p, cur, &d->procs, sizeof(proc_t), MAX_LIST);
    if (strcmp(key, "xid_events") == 0)
        return parse_list_count(p, cur, &d->xids, sizeof(xid_t), MAX_LIST);
    if (strcmp(key, "nvlinks") == 0)
        return parse_list_count(p, cur, &d->nvlinks, sizeof(nvlink_t), MAX_LIST);
    if (strcmp(key, "fields") == 0)
        return parse_list_count(p, cur, &d->fields, sizeof(field_t), MAX_LIST);
    if (strcmp(key, "process") == 0)
        return parse_process(p, cur);
    if (strcmp(key, "xid") == 0)
        return parse_xid(p, cur);
    if (strcmp(key, "nvlink") == 0)
        return parse_nvlink(p, cur);
    if (strcmp(key, "field") == 0)
        return parse_field(p, cur);
    if (strcmp(key, "cpu_affinity") == 0)
        return parse_cpu_affinity(p, cur);
    if (strcmp(key, "topology") == 0)
        return parse_topology(p, cur);
    if (strcmp(key, "p2p") == 0)
        return parse_p2p(p, cur);
    if (strcmp(key, "fabric") == 0)
        return parse_fabric(p, cur);
    if (strcmp(key, "gpm") == 0)
        return parse_gpm(p, cur);
    *handled = 0;
    return 0;
}

static int parse_line(parser_t *p, char *line)
{
    char *cur = line;
    char *key = next_tok(&cur);
    if (!key || key[0] == '#')
        return 0;
    if (p->saw_end)
        return p->why = "data after end", -1;
    int handled;
    int rc = parse_special(p, key, &cur, &handled);
    if (handled) {
        if (rc == 0 && strcmp(key, "cpu_affinity") != 0 && strcmp(key, "driver_version") != 0 &&
            strcmp(key, "nvml_version") != 0 && !at_line_end(&cur))
            return p->why = "unexpected trailing tokens", -1;
        return rc;
    }
    if (!p->dev)
        return p->why = "device key before any device line", -1;
    for (size_t i = 0; i < sizeof DEVICE_KEYS / sizeof DEVICE_KEYS[0]; i++) {
        if (strcmp(DEVICE_KEYS[i].key, key) != 0)
            continue;
        if (parse_device_key(p, &DEVICE_KEYS[i], &cur) != 0)
            return -1;
        if (DEVICE_KEYS[i].type != KT_STR && !at_line_end(&cur))
            return p->why = "unexpected trailing tokens", -1;
        return 0;
    }
    return p->why = "unknown key", -1;
}

static int list_complete(const list_t *l) { return l->n == l->cap; }

static int dev_lists_complete(const fake_dev *d)
{
    return list_complete(&d->procs) && list_complete(&d->xids) && list_complete(&d->nvlinks) &&
           list_complete(&d->fields) && list_complete(&d->migs);
}

/* Every announced list got all its items. */
static int lists_complete(const fake_state *st)
{
    if (!list_complete(&st->errors) || !list_complete(&st->delays))
        return 0;
    for (int i = 0; i < st->ndev; i++) {
        const fake_dev *d = &st->devs[i];
        if (!dev_lists_complete(d))
            return 0;
        for (int j = 0; j < d->migs.n; j++)
            if (!dev_lists_complete((const fake_dev *)d->migs.items + j))
                return 0;
    }
    return 1;
}

static void free_state(fake_state *s)
{
    if (!s)
        return;
    arena_free(&s->arena);
    free(s);
}

/* Parses the file; on error prints one line to stderr and returns NULL. */
static fake_state *load_state_file(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    fake_state *st = calloc(1, sizeof *st);
    parser_t p = {st, NULL, NULL, 0, NULL};
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, ok = st != NULL;
    while (ok && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (lineno == 1) {
            char expect[32];
            snprintf(expect, sizeof expect, "%s %d", FORMAT_NAME, FORMAT_VERSION);
            if (strcmp(line, expect) != 0) {
                p.why = "not a fakenvml version 1 state file";
                ok = 0;
            }
            continue;
        }
        ok = parse_line(&p, line) == 0;
    }
    free(line);
    fclose(f);
    if (ok && !p.saw_end) {
        p.why = "truncated (no end line)";
        ok = 0;
    }
    if (ok && !lists_complete(st)) {
        p.why = "fewer list items than announced";
        ok = 0;
    }
    if (!ok) {
        fprintf(stderr, "fakenvml: %s:%d: %s\n", path, lineno, p.why ? p.why : "out of memory");
        free_state(st);
        return NULL;
    }
    return st;
}

/* ------------------------------------------------------------------------ */
/* Library state, handles and the call protocol                             */
/* ------------------------------------------------------------------------ */

/* The address of a slot is the handle; the slot's contents are never used. */
struct nvmlDevice_st {
    unsigned char unused;
};

/* How far a set has delivered one device's XID events, which the state file
 * lists in time order: everything before `until`, and the first `at_until`
 * events stamped exactly `until`. Survives reloads that append later events. */
typedef struct {
    double until;
    int at_until;
} watermark_t;

struct nvmlEventSet_st {
    struct nvmlEventSet_st *next;
    unsigned long long types[MAX_DEVICES];
    watermark_t marks[MAX_DEVICES];
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static fake_state *g_state;

/* Scenario time for the process windows (0 before a state is loaded). */
static double scenario_now(void) { return g_state ? state_time(g_state) : 0.0; }
static int g_init_count;
static char g_path[4096];
static struct stat g_seen; /* the file version last parsed (or rejected) */
static int g_seen_bad;     /* that version was rejected */
static double g_last_check;
static struct nvmlDevice_st g_phys_handles[MAX_DEVICES];
static struct nvmlDevice_st g_mig_handles[MAX_DEVICES][MAX_MIG];
static struct nvmlEventSet_st *g_sets;

/* A thread inside nvmlEventSetWait, woken through its eventfd when what it waits on changes
 * (a set freed, a device registered, nvmlShutdown, or a change of the state file that
 * another waiter took from the shared inotify instance). The list is guarded by g_lock. */
typedef struct event_waiter {
    struct event_waiter *next;
    int wake_fd; /* eventfd, or -1 */
} event_waiter;
static event_waiter *g_waiters;

/* Lock held. */
static void wake_waiters_locked(void)
{
    uint64_t one = 1;
    for (event_waiter *w = g_waiters; w; w = w->next)
        if (w->wake_fd >= 0 && write(w->wake_fd, &one, sizeof one) < 0) {
            /* the counter is full: the waiter is woken already */
        }
}

static nvmlDevice_t phys_handle(int index) { return &g_phys_handles[index]; }
static nvmlDevice_t mig_handle(int index, int mig) { return &g_mig_handles[index][mig]; }

/* Maps a handle to (device index, MIG index or -1) by its address. */
static int decode_handle(nvmlDevice_t h, int *index, int *mig)
{
    uintptr_t p = (uintptr_t)h;
    uintptr_t base = (uintptr_t)g_phys_handles;
    if (p >= base && p < base + sizeof g_phys_handles) {
        *index = (int)(p - base);
        *mig = -1;
        return 1;
    }
    base = (uintptr_t)g_mig_handles;
    if (p >= base && p < base + sizeof g_mig_handles) {
        size_t slot = p - base;
        *index = (int)(slot / MAX_MIG);
        *mig = (int)(slot % MAX_MIG);
        return 1;
    }
    return 0;
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Re-reads the state file if it changed. Lock held. Returns 0 if the current
 * state is the file's (or the file is unchanged), -1 if it could not be used. */
static int refresh_locked(int force)
{
    double now = mono_now();
    if (!force && g_state && now - g_last_check < RELOAD_CHECK_S)
        return 0;
    g_last_check = now;
    struct stat st;
    if (stat(g_path, &st) != 0)
        return -1;
    if (g_state && same_file(&st, &g_seen))
        return g_seen_bad ? -1 : 0;
    g_seen = st;
    fake_state *fresh = load_state_file(g_path);
    g_seen_bad = fresh == NULL;
    if (!fresh)
        return -1;
    free_state(g_state);
    g_state = fresh;
    return 0;
}

static int function_matches(const char *rule, const char *fn)
{
    if (strcmp(rule, "*") == 0 || strcmp(rule, fn) == 0)
        return 1;
    if (strncmp(fn, "nvmlInit", 8) == 0)
        return strcmp(rule, "nvmlInit") == 0;
    /* The rule may name the function without its _vN suffix. */
    const char *v = strrchr(fn, '_');
    if (!v || v[1] != 'v' || v[2] == '\0' || strspn(v + 2, "0123456789") != strlen(v + 2))
        return 0;
    size_t base = (size_t)(v - fn);
    return strlen(rule) == base && strncmp(rule, fn, base) == 0;
}

static const rule_t *find_rule(const list_t *rules, const char *fn, int device, double t)
{
    const rule_t *r = rules->items;
    for (int i = 0; i < rules->n; i++) {
        if (r[i].device >= 0 && r[i].device != device)
            continue;
        if (t < r[i].from_s || t >= r[i].until_s)
            continue;
        if (function_matches(r[i].fn, fn))
            return &r[i];
    }
    return NULL;
}

/* Locks, and checks that the library is initialized. */
static nvmlReturn_t lock_initialized(void)
{
    pthread_mutex_lock(&g_lock);
    if (g_init_count == 0 || !g_state) {
        pthread_mutex_unlock(&g_lock);
        return NVML_ERROR_UNINITIALIZED;
    }
    refresh_locked(0);
    return NVML_SUCCESS;
}

static nvmlReturn_t leave(nvmlReturn_t rc)
{
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Sleeps for a matching delay rule with the lock released. Lock held on entry;
 * on return the lock is held iff the result is NVML_SUCCESS. */
static nvmlReturn_t apply_delay(const char *fn, int device)
{
    const rule_t *r = find_rule(&g_state->delays, fn, device, state_time(g_state));
    if (!r || r->seconds <= 0)
        return NVML_SUCCESS;
    rule_t rule = *r;
    pthread_mutex_unlock(&g_lock);
    pass_delay(&rule);
    return lock_initialized();
}

static nvmlReturn_t injected_error(const char *fn, int device, double t)
{
    const rule_t *r = find_rule(&g_state->errors, fn, device, t);
    return r ? r->code : NVML_SUCCESS;
}

/* What an API call works on once entered. */
typedef struct {
    fake_state *st;
    fake_dev *dev;  /* the device the handle names (a MIG device for MIG handles) */
    fake_dev *phys; /* the physical GPU: dev itself or the MIG device's parent */
    int index;      /* physical device index */
    int mig;        /* MIG index, -1 for a physical handle */
    double t;
} call_t;

/* Entry of a call that names no device. On success the lock is held. */
static nvmlReturn_t enter(const char *fn, call_t *c)
{
    nvmlReturn_t rc = lock_initialized();
    if (rc == NVML_SUCCESS)
        rc = apply_delay(fn, -1);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(c, 0, sizeof *c);
    c->st = g_state;
    c->t = state_time(g_state);
    c->index = c->mig = -1;
    rc = injected_error(fn, -1, c->t);
    return rc == NVML_SUCCESS ? rc : leave(rc);
}

static int is_lost(const fake_dev *phys, double t)
{
    return phys->lost_at.present && t >= phys->lost_at.v;
}

/* Resolves a handle in the current state. Lock held. */
static nvmlReturn_t resolve_locked(nvmlDevice_t h, call_t *c)
{
    int index, mig;
    if (!decode_handle(h, &index, &mig) || index >= g_state->ndev)
        return NVML_ERROR_INVALID_ARGUMENT;
    fake_dev *phys = &g_state->devs[index];
    if (mig >= phys->migs.n)
        return NVML_ERROR_INVALID_ARGUMENT;
    c->st = g_state;
    c->index = index;
    c->mig = mig;
    c->phys = phys;
    c->dev = mig < 0 ? phys : (fake_dev *)phys->migs.items + mig;
    c->t = state_time(g_state);
    return is_lost(phys, c->t) ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

/* Entry of a call on one device: init, delay, handle, lost GPU, injected
 * error, in that order. On success the lock is held. */
static nvmlReturn_t enter_device(const char *fn, nvmlDevice_t h, call_t *c)
{
    int index, mig;
    nvmlReturn_t rc = lock_initialized();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!decode_handle(h, &index, &mig))
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    rc = apply_delay(fn, index);
    if (rc != NVML_SUCCESS)
        return rc;
    rc = resolve_locked(h, c);
    if (rc == NVML_SUCCESS)
        rc = injected_error(fn, index, c->t);
    return rc == NVML_SUCCESS ? rc : leave(rc);
}

/* Same as enter_device, for functions that only exist on physical GPUs. */
static nvmlReturn_t enter_physical(const char *fn, nvmlDevice_t h, call_t *c)
{
    nvmlReturn_t rc = enter_device(fn, h, c);
    if (rc == NVML_SUCCESS && c->mig >= 0)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    return rc;
}

/* Enters a device call only to fail it with code (after init, delay, handle
 * and lost-GPU checks, which take precedence). */
static nvmlReturn_t enter_and_fail(const char *fn, nvmlDevice_t h, nvmlReturn_t code)
{
    call_t c;
    nvmlReturn_t rc = enter_device(fn, h, &c);
    return rc == NVML_SUCCESS ? leave(code) : rc;
}

/* Copies a string into a caller's buffer the way NVML does. */
static nvmlReturn_t copy_out(char *buf, unsigned int length, const char *s)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(s);
    if (n + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, n + 1);
    return NVML_SUCCESS;
}

static void *dev_member(fake_dev *d, size_t offset) { return (char *)d + offset; }

/* Shared body of the getters that return one signal as an unsigned int. */
static nvmlReturn_t get_signal_uint(const char *fn, nvmlDevice_t h, size_t offset, unsigned int *out)
{
    call_t c;
    nvmlReturn_t rc = enter_device(fn, h, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!out)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    const signal_t *s = dev_member(c.dev, offset);
    if (!s->present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *out = dev_uint(c.dev, sig_value(s, c.t));
    return leave(NVML_SUCCESS);
}

/* Shared body of the getters that return one number as an unsigned int. */
static nvmlReturn_t get_num_uint(const char *fn, nvmlDevice_t h, size_t offset, unsigned int *out)
{
    call_t c;
    nvmlReturn_t rc = enter_device(fn, h, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!out)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    const num_t *n = dev_member(c.dev, offset);
    if (!n->present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *out = dev_uint(c.dev, n->v);
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------ */
/* Initialization and system queries                                        */
/* ------------------------------------------------------------------------ */

/* Every init entry point: (re)reads the state named by the environment. */
static nvmlReturn_t init_common(const char *fn)
{
    const char *path = getenv(STATE_ENV);
    pthread_mutex_lock(&g_lock);
    if (!path || !path[0] || strlen(path) >= sizeof g_path)
        return leave(NVML_ERROR_DRIVER_NOT_LOADED);
    if (strcmp(path, g_path) != 0) {
        memcpy(g_path, path, strlen(path) + 1);
        memset(&g_seen, 0, sizeof g_seen);
        free_state(g_state);
        g_state = NULL;
    }
    /* A missing or broken file means no driver, even if an older version of
     * it is still serving callers that initialized earlier. */
    if (refresh_locked(1) != 0 || !g_state)
        return leave(NVML_ERROR_DRIVER_NOT_LOADED);
    const rule_t *delay = find_rule(&g_state->delays, fn, -1, state_time(g_state));
    if (delay && delay->seconds > 0) {
        rule_t rule = *delay;
        pthread_mutex_unlock(&g_lock);
        pass_delay(&rule);
        pthread_mutex_lock(&g_lock);
        if (!g_state)
            return leave(NVML_ERROR_DRIVER_NOT_LOADED);
    }
    nvmlReturn_t rc = injected_error(fn, -1, state_time(g_state));
    if (rc == NVML_SUCCESS)
        g_init_count++;
    return leave(rc);
}

NVML_API nvmlReturn_t nvmlInit(void) { return init_common(__func__); }
NVML_API nvmlReturn_t nvmlInit_v2(void) { return init_common(__func__); }

NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags; /* NO_GPUS / NO_ATTACH make no difference to the simulation */
    return init_common(__func__);
}

NVML_API nvmlReturn_t nvmlShutdown(void)
{
    call_t c;
    nvmlReturn_t rc = enter(__func__, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    g_init_count--;
    if (g_init_count == 0)
        wake_waiters_locked();
    return leave(NVML_SUCCESS);
}

NVML_API const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "ECC is not supported for vGPU";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: return "Reset type not supported";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t get_global_str(const char *fn, size_t offset, char *buf, unsigned int length)
{
    call_t c;
    nvmlReturn_t rc = enter(fn, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    const str_t *s = (const str_t *)((const char *)c.st + offset);
    if (!s->present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    return leave(copy_out(buf, length, s->s));
}

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    return get_global_str(__func__, offsetof(fake_state, driver_version), version, length);
}

NVML_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    return get_global_str(__func__, offsetof(fake_state, nvml_version), version, length);
}

static nvmlReturn_t get_cuda_version(const char *fn, int *version)
{
    call_t c;
    nvmlReturn_t rc = enter(fn, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!version)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.st->cuda_version.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *version = to_int(c.st->cuda_version.v);
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    return get_cuda_version(__func__, cudaDriverVersion);
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return get_cuda_version(__func__, cudaDriverVersion);
}

/* ------------------------------------------------------------------------ */
/* Enumeration                                                              */
/* ------------------------------------------------------------------------ */

static nvmlReturn_t get_count(const char *fn, unsigned int *count)
{
    call_t c;
    nvmlReturn_t rc = enter(fn, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *count = (unsigned int)c.st->ndev;
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) { return get_count(__func__, deviceCount); }
NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) { return get_count(__func__, deviceCount); }

static nvmlReturn_t get_handle_by_index(const char *fn, unsigned int index, nvmlDevice_t *device)
{
    call_t c;
    nvmlReturn_t rc = enter(fn, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!device || index >= (unsigned int)c.st->ndev)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *device = phys_handle((int)index);
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return get_handle_by_index(__func__, index, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    return get_handle_by_index(__func__, index, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    call_t c;
    nvmlReturn_t rc = enter(__func__, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!uuid || !device)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (int i = 0; i < c.st->ndev; i++) {
        const fake_dev *d = &c.st->devs[i];
        if (d->uuid.present && strcmp(d->uuid.s, uuid) == 0) {
            *device = phys_handle(i);
            return leave(NVML_SUCCESS);
        }
        for (int j = 0; j < d->migs.n; j++) {
            const fake_dev *m = (const fake_dev *)d->migs.items + j;
            if (m->uuid.present && strcmp(m->uuid.s, uuid) == 0) {
                *device = mig_handle(i, j);
                return leave(NVML_SUCCESS);
            }
        }
    }
    return leave(NVML_ERROR_NOT_FOUND);
}

typedef struct {
    unsigned int domain, bus, device, function;
} pci_addr_t;

/* Accepts "domain:bus:device.function" and "bus:device.function" (hex). */
static int parse_pci_addr(const char *s, pci_addr_t *a)
{
    char tail;
    memset(a, 0, sizeof *a);
    if (sscanf(s, "%x:%x:%x.%x%c", &a->domain, &a->bus, &a->device, &a->function, &tail) == 4)
        return 0;
    a->domain = 0;
    if (sscanf(s, "%x:%x.%x%c", &a->bus, &a->device, &a->function, &tail) == 3)
        return 0;
    return -1;
}

static nvmlReturn_t get_handle_by_pci(const char *fn, const char *bus_id, nvmlDevice_t *device)
{
    call_t c;
    pci_addr_t want, have;
    nvmlReturn_t rc = enter(fn, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!bus_id || !device || parse_pci_addr(bus_id, &want) != 0)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (int i = 0; i < c.st->ndev; i++) {
        const fake_dev *d = &c.st->devs[i];
        if (!d->pci_bus_id.present || parse_pci_addr(d->pci_bus_id.s, &have) != 0)
            continue;
        if (memcmp(&want, &have, sizeof want) == 0) {
            *device = phys_handle(i);
            return leave(NVML_SUCCESS);
        }
    }
    return leave(NVML_ERROR_NOT_FOUND);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return get_handle_by_pci(__func__, pciBusId, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    return get_handle_by_pci(__func__, pciBusId, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    call_t c;
    nvmlReturn_t rc = enter_physical(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!index)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *index = (unsigned int)c.index;
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------ */
/* Identity                                                                 */
/* ------------------------------------------------------------------------ */

static nvmlReturn_t get_dev_str(const char *fn, nvmlDevice_t h, size_t offset, char *buf, unsigned int length)
{
    call_t c;
    nvmlReturn_t rc = enter_device(fn, h, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    const str_t *s = dev_member(c.dev, offset);
    if (!s->present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    return leave(copy_out(buf, length, s->s));
}

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    return get_dev_str(__func__, device, offsetof(fake_dev, name), name, length);
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    return get_dev_str(__func__, device, offsetof(fake_dev, uuid), uuid, length);
}

NVML_API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    return get_dev_str(__func__, device, offsetof(fake_dev, serial), serial, length);
}

/* Fills an nvmlPciInfo_t from a bus id string and the two PCI ids. */
static nvmlReturn_t fill_pci_info(nvmlPciInfo_t *pci, const char *bus_id, unsigned int device_id,
                                  unsigned int subsystem_id)
{
    pci_addr_t a;
    if (parse_pci_addr(bus_id, &a) != 0)
        return NVML_ERROR_UNKNOWN;
    memset(pci, 0, sizeof *pci);
    int n = snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", a.domain & 0xFFFFu,
                     a.bus & 0xFFu, a.device & 0xFFu, a.function & 0xFu);
    int m = snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", a.domain, a.bus & 0xFFu,
                     a.device & 0xFFu, a.function & 0xFu);
    if (n < 0 || m < 0)
        return NVML_ERROR_UNKNOWN;
    pci->domain = a.domain;
    pci->bus = a.bus;
    pci->device = a.device;
    pci->pciDeviceId = device_id;
    pci->pciSubSystemId = subsystem_id;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!pci)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    const fake_dev *d = c.dev;
    if (!d->pci_bus_id.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    return leave(fill_pci_info(pci, d->pci_bus_id.s, to_uint(d->pci_device_id.v), to_uint(d->pci_subsystem_id.v)));
}

NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    return get_num_uint(__func__, device, offsetof(fake_dev, minor_number), minorNumber);
}

NVML_API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch)
{
    return get_num_uint(__func__, device, offsetof(fake_dev, architecture), arch);
}

/* ------------------------------------------------------------------------ */
/* Memory, utilization, power, temperature, clocks                          */
/* ------------------------------------------------------------------------ */

typedef struct {
    unsigned long long total, reserved, used, free;
} mem_values_t;

typedef struct {
    double used_bytes, sm, mem;
} process_load_t;

/* What the device's live processes add to its own figures, when the scenario
 * asks for it (load_from_processes): simulated contexts then show up in the
 * device's memory and utilization like real ones. */
static process_load_t process_load(const fake_dev *d)
{
    process_load_t load = {0, 0, 0};
    if (!d->load_from_processes.present || d->load_from_processes.v == 0)
        return load;
    const proc_t *p = d->procs.items;
    for (int i = 0; i < d->procs.n; i++) {
        if (!proc_visible(p + i))
            continue;
        load.used_bytes += p[i].used_bytes;
        load.sm += p[i].sm;
        load.mem += p[i].mem;
    }
    return load;
}

static int memory_values(const fake_dev *d, double t, mem_values_t *m)
{
    if (!d->memory_total.present || !d->memory_used.present)
        return -1;
    m->total = to_ull(d->memory_total.v);
    m->reserved = d->memory_reserved.present ? to_ull(d->memory_reserved.v) : 0;
    m->used = dev_ull(d, sig_value(&d->memory_used, t) + process_load(d).used_bytes);
    unsigned long long taken = m->reserved + m->used;
    m->free = taken >= m->total ? 0 : m->total - taken;
    return 0;
}

/* Version 1 counts the driver's reserved memory as used, as current drivers do. */
NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    call_t c;
    mem_values_t m;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!memory)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (memory_values(c.dev, c.t, &m) != 0)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    memory->total = m.total;
    memory->used = m.used + m.reserved;
    memory->free = m.free;
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    call_t c;
    mem_values_t m;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!memory)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (memory->version != NVML_MEMORY_V2)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (memory_values(c.dev, c.t, &m) != 0)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    memory->total = m.total;
    memory->reserved = m.reserved;
    memory->used = m.used;
    memory->free = m.free;
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!utilization)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.dev->util_gpu.present || !c.dev->util_memory.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    process_load_t load = process_load(c.dev);
    utilization->gpu = dev_uint(c.dev, dev_percent(c.dev, sig_value(&c.dev->util_gpu, c.t) + load.sm));
    utilization->memory =
        dev_uint(c.dev, dev_percent(c.dev, sig_value(&c.dev->util_memory, c.t) + load.mem));
    return leave(NVML_SUCCESS);
}

static nvmlReturn_t get_codec_util(const char *fn, nvmlDevice_t h, size_t offset, unsigned int *util,
                                   unsigned int *period_us)
{
    if (!period_us)
        return enter_and_fail(fn, h, NVML_ERROR_INVALID_ARGUMENT);
    nvmlReturn_t rc = get_signal_uint(fn, h, offset, util);
    if (rc == NVML_SUCCESS)
        *period_us = ENCODER_SAMPLING_US;
    return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                      unsigned int *samplingPeriodUs)
{
    return get_codec_util(__func__, device, offsetof(fake_dev, encoder), utilization, samplingPeriodUs);
}

NVML_API nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                      unsigned int *samplingPeriodUs)
{
    return get_codec_util(__func__, device, offsetof(fake_dev, decoder), utilization, samplingPeriodUs);
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    return get_signal_uint(__func__, device, offsetof(fake_dev, power), power);
}

NVML_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return get_num_uint(__func__, device, offsetof(fake_dev, power_limit), limit);
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    return get_num_uint(__func__, device, offsetof(fake_dev, power_limit), limit);
}

/* energy_start_mj plus the integral of power_mw (mW * s = mJ). */
NVML_API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!energy)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.dev->energy_start.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    double mj = c.dev->energy_start.v;
    if (c.dev->power.present)
        mj += sig_integral(&c.dev->power, c.t);
    *energy = dev_ull(c.dev, dfloor(mj));
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensorType, unsigned int *temp)
{
    if (sensorType >= NVML_TEMPERATURE_COUNT)
        return enter_and_fail(__func__, device, NVML_ERROR_INVALID_ARGUMENT);
    if (sensorType != NVML_TEMPERATURE_GPU)
        return enter_and_fail(__func__, device, NVML_ERROR_NOT_SUPPORTED);
    return get_signal_uint(__func__, device, offsetof(fake_dev, temperature), temp);
}

NVML_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned int type, unsigned int *clock)
{
    if (type >= NVML_CLOCK_COUNT)
        return enter_and_fail(__func__, device, NVML_ERROR_INVALID_ARGUMENT);
    return get_signal_uint(__func__, device, offsetof(fake_dev, clock) + type * sizeof(signal_t), clock);
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, unsigned int type, unsigned int *clock)
{
    if (type >= NVML_CLOCK_COUNT)
        return enter_and_fail(__func__, device, NVML_ERROR_INVALID_ARGUMENT);
    return get_num_uint(__func__, device, offsetof(fake_dev, max_clock) + type * sizeof(num_t), clock);
}

static nvmlReturn_t get_clock_reasons(const char *fn, nvmlDevice_t h, unsigned long long *reasons)
{
    call_t c;
    nvmlReturn_t rc = enter_device(fn, h, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!reasons)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.dev->clocks_event_reasons.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *reasons = to_ull(sig_value(&c.dev->clocks_event_reasons, c.t));
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return get_clock_reasons(__func__, device, reasons);
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return get_clock_reasons(__func__, device, reasons);
}

NVML_API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, unsigned int *pState)
{
    nvmlReturn_t rc = get_signal_uint(__func__, device, offsetof(fake_dev, pstate), pState);
    if (rc == NVML_SUCCESS && *pState > 15)
        *pState = 32; /* NVML_PSTATE_UNKNOWN */
    return rc;
}

/* ------------------------------------------------------------------------ */
/* ECC, row remapping, page retirement, PCIe replays                        */
/* ------------------------------------------------------------------------ */

NVML_API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!current || !pending)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.dev->ecc_mode.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *current = *pending = c.dev->ecc_mode.v != 0;
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, unsigned int errorType,
                                                  unsigned int counterType, unsigned long long *eccCounts)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!eccCounts || errorType > 1 || counterType > 1)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    const counter_t *ctr = &c.dev->ecc[errorType];
    if (!c.dev->ecc_mode.present || c.dev->ecc_mode.v == 0 || !ctr->present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *eccCounts = to_ull(ctr_value(ctr, c.t));
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                                unsigned int *isPending, unsigned int *failureOccurred)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!corrRows || !uncRows || !isPending || !failureOccurred)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    const num_t *r = c.dev->remapped;
    if (!r[0].present || !r[1].present || !r[2].present || !r[3].present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *corrRows = to_uint(r[0].v);
    *uncRows = to_uint(r[1].v);
    *isPending = r[2].v != 0;
    *failureOccurred = r[3].v != 0;
    return leave(NVML_SUCCESS);
}

/* Made-up but stable page addresses, distinct per device and cause. */
static unsigned long long retired_page_address(int device, unsigned int cause, unsigned int i)
{
    return 0x100000000ULL * (unsigned long long)(device + 1) + 0x10000000ULL * cause + 0x1000ULL * i;
}

static nvmlReturn_t get_retired_pages(const char *fn, nvmlDevice_t h, unsigned int cause, unsigned int *count,
                                      unsigned long long *addresses, unsigned long long *timestamps)
{
    call_t c;
    nvmlReturn_t rc = enter_device(fn, h, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count || cause > 1)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    const num_t *n = &c.dev->retired[cause];
    if (!n->present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    unsigned int pages = to_uint(n->v);
    if (!addresses || *count < pages) {
        *count = pages;
        return leave(pages == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned int i = 0; i < pages; i++) {
        addresses[i] = retired_page_address(c.index, cause, i);
        if (timestamps)
            timestamps[i] = to_ull(c.st->epoch);
    }
    *count = pages;
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, unsigned int cause, unsigned int *pageCount,
                                                unsigned long long *addresses)
{
    return get_retired_pages(__func__, device, cause, pageCount, addresses, NULL);
}

NVML_API nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, unsigned int cause, unsigned int *pageCount,
                                                   unsigned long long *addresses, unsigned long long *timestamps)
{
    return get_retired_pages(__func__, device, cause, pageCount, addresses, timestamps);
}

NVML_API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, unsigned int *isPending)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!isPending)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.dev->retired_pending.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *isPending = c.dev->retired_pending.v != 0;
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!value)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.dev->pcie_replay.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *value = to_uint(ctr_value(&c.dev->pcie_replay, c.t));
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------ */
/* Processes                                                                */
/* ------------------------------------------------------------------------ */

typedef struct {
    const proc_t *proc;
    unsigned int gi, ci;
} proc_ref_t;

static unsigned int visible_processes(const fake_dev *d)
{
    unsigned int n = 0;
    const proc_t *p = d->procs.items;
    for (int i = 0; i < d->procs.n; i++)
        n += (unsigned int)proc_visible(p + i);
    return n;
}

/* Visits the processes of a handle of the given kind: a MIG handle sees its
 * own; a physical GPU sees its own plus those of its MIG devices. Returns the
 * number visited; out (if not NULL) receives up to max of them. */
static unsigned int collect_processes(const call_t *c, unsigned int kind, proc_ref_t *out, unsigned int max)
{
    unsigned int n = 0;
    const fake_dev *d = c->dev;
    unsigned int gi = NVML_INSTANCE_ID_NONE, ci = NVML_INSTANCE_ID_NONE;
    if (c->mig >= 0) {
        gi = to_uint(d->gpu_instance_id.v);
        ci = to_uint(d->compute_instance_id.v);
    }
    const proc_t *p = d->procs.items;
    for (int i = 0; i < d->procs.n; i++, p++) {
        if (!(p->types & kind) || !proc_visible(p))
            continue;
        if (out && n < max)
            out[n] = (proc_ref_t){p, gi, ci};
        n++;
    }
    if (c->mig >= 0)
        return n;
    for (int j = 0; j < d->migs.n; j++) {
        call_t child = *c;
        child.dev = (fake_dev *)d->migs.items + j;
        child.mig = j;
        n += collect_processes(&child, kind, out ? out + (n < max ? n : max) : NULL, n < max ? max - n : 0);
    }
    return n;
}

static int has_process_list(const fake_dev *d)
{
    if (d->procs.present)
        return 1;
    for (int j = 0; j < d->migs.n; j++)
        if (((const fake_dev *)d->migs.items + j)->procs.present)
            return 1;
    return 0;
}

static nvmlReturn_t running_processes(const char *fn, nvmlDevice_t h, unsigned int kind, unsigned int *count,
                                      nvmlProcessInfo_t *infos)
{
    call_t c;
    nvmlReturn_t rc = enter_device(fn, h, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!has_process_list(c.dev))
        return leave(NVML_ERROR_NOT_SUPPORTED);
    unsigned int n = collect_processes(&c, kind, NULL, 0);
    if (!infos || *count < n) {
        *count = n;
        return leave(n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE);
    }
    proc_ref_t *refs = calloc(n ? n : 1, sizeof *refs);
    if (!refs)
        return leave(NVML_ERROR_MEMORY);
    collect_processes(&c, kind, refs, n);
    for (unsigned int i = 0; i < n; i++) {
        infos[i].pid = refs[i].proc->pid;
        infos[i].usedGpuMemory = to_ull(refs[i].proc->used_bytes);
        infos[i].gpuInstanceId = refs[i].gi;
        infos[i].computeInstanceId = refs[i].ci;
    }
    free(refs);
    *count = n;
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvmlProcessInfo_t *infos)
{
    return running_processes(__func__, device, PROC_COMPUTE, infoCount, infos);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvmlProcessInfo_t *infos)
{
    return running_processes(__func__, device, PROC_COMPUTE, infoCount, infos);
}

NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                               nvmlProcessInfo_t *infos)
{
    return running_processes(__func__, device, PROC_GRAPHICS, infoCount, infos);
}

NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                               nvmlProcessInfo_t *infos)
{
    return running_processes(__func__, device, PROC_GRAPHICS, infoCount, infos);
}

/* Entry shared by the two per-process utilization queries: every process of a
 * physical GPU has one sample, taken at the start of the current sampling
 * period; MIG devices have none. The stamp is the wall clock, as the driver's
 * are, even while simulated time is frozen: a frozen stamp would never pass a
 * caller's last-seen timestamp again. Within one period a caller passing the
 * newest stamp it saw gets NOT_FOUND, as from the driver's sample buffer. */
static nvmlReturn_t enter_process_samples(const char *fn, nvmlDevice_t h, unsigned long long last_seen, call_t *c,
                                          unsigned long long *stamp)
{
    nvmlReturn_t rc = enter_device(fn, h, c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (c->mig >= 0 || !c->dev->procs.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    unsigned long long now_us = (unsigned long long)to_ll(realtime_now() * 1e6);
    *stamp = now_us - now_us % PROCESS_SAMPLING_US;
    if (visible_processes(c->dev) == 0 || *stamp <= last_seen)
        return leave(NVML_ERROR_NOT_FOUND);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                                      unsigned int *processSamplesCount,
                                                      unsigned long long lastSeenTimeStamp)
{
    call_t c;
    unsigned long long stamp;
    if (!processSamplesCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = enter_process_samples(__func__, device, lastSeenTimeStamp, &c, &stamp);
    if (rc != NVML_SUCCESS)
        return rc;
    unsigned int n = visible_processes(c.dev);
    if (!utilization || *processSamplesCount < n) {
        *processSamplesCount = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    const proc_t *p = c.dev->procs.items;
    unsigned int k = 0;
    for (int i = 0; i < c.dev->procs.n && k < n; i++) {
        if (proc_visible(p + i))
            utilization[k++] = (nvmlProcessUtilizationSample_t){p[i].pid, stamp, p[i].sm, p[i].mem, p[i].enc,
                                                                p[i].dec};
    }
    *processSamplesCount = k;
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
                                                            nvmlProcessesUtilizationInfo_t *procesesUtilInfo)
{
    call_t c;
    unsigned long long stamp;
    nvmlProcessesUtilizationInfo_t *info = procesesUtilInfo;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != NVML_PROCESSES_UTILIZATION_INFO_V1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t rc = enter_process_samples(__func__, device, info->lastSeenTimeStamp, &c, &stamp);
    if (rc != NVML_SUCCESS)
        return rc;
    unsigned int n = visible_processes(c.dev);
    if (!info->procUtilArray || info->processSamplesCount < n) {
        info->processSamplesCount = n;
        return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    const proc_t *p = c.dev->procs.items;
    unsigned int k = 0;
    for (int i = 0; i < c.dev->procs.n && k < n; i++) {
        if (proc_visible(p + i))
            info->procUtilArray[k++] =
                (nvmlProcessUtilizationInfo_v1_t){stamp, p[i].pid, p[i].sm, p[i].mem, p[i].enc, p[i].dec, 0, 0};
    }
    info->processSamplesCount = k;
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------ */
/* Events                                                                   */
/* ------------------------------------------------------------------------ */

static unsigned long long supported_event_types(const fake_dev *d)
{
    unsigned long long types = NVML_EVENT_TYPE_XID_CRITICAL | NVML_EVENT_TYPE_PSTATE | NVML_EVENT_TYPE_CLOCK;
    if (d->ecc_mode.present && d->ecc_mode.v != 0)
        types |= NVML_EVENT_TYPE_SINGLE_BIT_ECC | NVML_EVENT_TYPE_DOUBLE_BIT_ECC;
    return types;
}

/* Lock held. NULL unless set is a live event set. */
static struct nvmlEventSet_st *find_set(nvmlEventSet_t set)
{
    for (struct nvmlEventSet_st *s = g_sets; s; s = s->next)
        if (s == set)
            return s;
    return NULL;
}

NVML_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    call_t c;
    nvmlReturn_t rc = enter(__func__, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!set)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    struct nvmlEventSet_st *s = calloc(1, sizeof *s);
    if (!s)
        return leave(NVML_ERROR_MEMORY);
    for (int i = 0; i < MAX_DEVICES; i++)
        s->marks[i].until = -1.0; /* before any event: events never have negative times */
    s->next = g_sets;
    g_sets = s;
    *set = s;
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    call_t c;
    nvmlReturn_t rc = enter(__func__, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    for (struct nvmlEventSet_st **pp = &g_sets; *pp; pp = &(*pp)->next) {
        if (*pp == set) {
            *pp = set->next;
            free(set);
            wake_waiters_locked();
            return leave(NVML_SUCCESS);
        }
    }
    return leave(NVML_ERROR_INVALID_ARGUMENT);
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    call_t c;
    nvmlReturn_t rc = enter_physical(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!eventTypes)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *eventTypes = supported_event_types(c.dev);
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)
{
    call_t c;
    nvmlReturn_t rc = enter_physical(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    struct nvmlEventSet_st *s = find_set(set);
    if (!s)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (eventTypes & ~supported_event_types(c.dev))
        return leave(NVML_ERROR_NOT_SUPPORTED);
    s->types[c.index] |= eventTypes;
    wake_waiters_locked(); /* one of its events may be due already */
    return leave(NVML_SUCCESS);
}

/* Index of the device's first undelivered XID event, or the count if none. */
static int next_xid(const fake_dev *d, const watermark_t *w)
{
    const xid_t *x = d->xids.items;
    int lo = 0, hi = d->xids.n;
    while (lo < hi) { /* first event at or after the watermark */
        int mid = lo + (hi - lo) / 2;
        if (x[mid].at_s < w->until)
            lo = mid + 1;
        else
            hi = mid;
    }
    int skipped = 0;
    while (lo < d->xids.n && x[lo].at_s == w->until && skipped < w->at_until) {
        lo++;
        skipped++;
    }
    return lo;
}

/* Lock held. Takes the earliest due, undelivered XID of a registered device. */
static int take_event(struct nvmlEventSet_st *s, const fake_state *st, double t, int *dev_out, const xid_t **xid_out)
{
    const xid_t *best = NULL;
    int best_dev = -1;
    for (int i = 0; i < st->ndev; i++) {
        if (!(s->types[i] & NVML_EVENT_TYPE_XID_CRITICAL))
            continue;
        const fake_dev *d = &st->devs[i];
        int next = next_xid(d, &s->marks[i]);
        if (next >= d->xids.n)
            continue;
        const xid_t *x = (const xid_t *)d->xids.items + next;
        if (x->at_s <= t && (!best || x->at_s < best->at_s)) {
            best = x;
            best_dev = i;
        }
    }
    if (!best)
        return 0;
    watermark_t *w = &s->marks[best_dev];
    if (best->at_s == w->until) {
        w->at_until++;
    } else {
        w->until = best->at_s;
        w->at_until = 1;
    }
    *dev_out = best_dev;
    *xid_out = best;
    return 1;
}

/* Lock held. Seconds until the earliest undelivered XID of a device registered in `s` is
 * due; NO_EVENT_DUE if none is to come (none left, or the simulated clock is frozen). */
#define NO_EVENT_DUE 1e9
static double next_event_in(const struct nvmlEventSet_st *s, const fake_state *st)
{
    if (st->frozen)
        return NO_EVENT_DUE;
    double t = state_time(st), best = NO_EVENT_DUE;
    for (int i = 0; i < st->ndev; i++) {
        if (!(s->types[i] & NVML_EVENT_TYPE_XID_CRITICAL))
            continue;
        const fake_dev *d = &st->devs[i];
        int next = next_xid(d, &s->marks[i]);
        if (next < d->xids.n) {
            double in = ((const xid_t *)d->xids.items)[next].at_s - t;
            if (in < best)
                best = in;
        }
    }
    return best;
}

/* One inotify instance for the process, made when a wait first sleeps and kept (closing
 * one waits for the kernel's RCU grace period: milliseconds, at every wait): it watches the
 * folder of the state file (a state file is replaced by a rename). Guarded by g_lock. */
static int g_watch_fd = -1;
static int g_watch_wd = -1;
static int g_watch_failed;
static char g_watch_folder[sizeof g_path];
static char g_watch_name[sizeof g_path];

static void forget_watch_in_child(void)
{
    g_watch_fd = g_watch_wd = -1; /* the parent's: a child makes its own */
}

/* Lock held. Whether the state file's folder is watched (else waits look at the file every
 * WAIT_STEP_S, as the library's other calls do). *fresh: the watch began just now. */
static int watch_state_file(int *fresh)
{
    const char *slash = strrchr(g_path, '/');
    const char *name = slash ? slash + 1 : g_path;
    char folder[sizeof g_path];
    if (!slash) {
        strcpy(folder, ".");
    } else if (slash == g_path) {
        strcpy(folder, "/");
    } else {
        memcpy(folder, g_path, (size_t)(slash - g_path));
        folder[slash - g_path] = '\0';
    }
    *fresh = 0;
    if (g_watch_fd >= 0 && g_watch_wd >= 0 && strcmp(folder, g_watch_folder) == 0) {
        strcpy(g_watch_name, name);
        return 1;
    }
    if (g_watch_fd < 0) {
        if (g_watch_failed)
            return 0;
        g_watch_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (g_watch_fd < 0) {
            g_watch_failed = 1;
            return 0;
        }
        pthread_atfork(NULL, NULL, forget_watch_in_child);
    }
    if (g_watch_wd >= 0)
        inotify_rm_watch(g_watch_fd, g_watch_wd);
    uint32_t mask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_ATTRIB;
    g_watch_wd = inotify_add_watch(g_watch_fd, folder, mask);
    if (g_watch_wd < 0)
        return 0;
    strcpy(g_watch_folder, folder);
    strcpy(g_watch_name, name);
    *fresh = 1;
    return 1;
}

/* Lock held. Whether the pending inotify events name the state file (takes them all). */
static int state_file_named(void)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    int named = 0;
    ssize_t n;
    while (g_watch_fd >= 0 && (n = read(g_watch_fd, buf, sizeof buf)) > 0) {
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            if ((ev->mask & IN_Q_OVERFLOW) || (ev->len && strcmp(ev->name, g_watch_name) == 0))
                named = 1;
            p += sizeof *ev + ev->len;
        }
    }
    return named;
}

/* Lock held. Registers `w`; its eventfd is made when it first sleeps long. */
static void waiter_add(event_waiter *w)
{
    w->wake_fd = -1;
    w->next = g_waiters;
    g_waiters = w;
}

/* Lock held. Unregisters `w`; its eventfd is closed after the lock is released. */
static void waiter_remove(event_waiter *w)
{
    for (event_waiter **pp = &g_waiters; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            return;
        }
    }
}

/* Without the lock: sleeps up to `seconds`, less when woken or when the watched folder
 * changes (`watch_fd`, or -1). */
static void waiter_sleep(const event_waiter *w, int watch_fd, double seconds)
{
    struct pollfd fds[2];
    nfds_t n = 0;
    if (w->wake_fd >= 0)
        fds[n++] = (struct pollfd){.fd = w->wake_fd, .events = POLLIN};
    if (watch_fd >= 0)
        fds[n++] = (struct pollfd){.fd = watch_fd, .events = POLLIN};
    struct timespec ts;
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9) + 1; /* never before the due time */
    if (ts.tv_nsec > 999999999)
        ts.tv_nsec = 999999999;
    if (n == 0) {
        sleep_seconds(seconds);
        return;
    }
    uint64_t count;
    if (ppoll(fds, n, &ts, NULL) > 0 && w->wake_fd >= 0 &&
        read(w->wake_fd, &count, sizeof count) < 0) {
        /* woken by the file, not through the eventfd: nothing to take */
    }
}

/* Waits as a driver does: asleep until an event is due, the state file changes, the set is
 * freed, a device is registered, NVML is shut down, or the timeout. */
static nvmlReturn_t event_wait(const char *fn, nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    call_t c;
    double deadline = mono_now() + timeoutms / 1000.0;
    if (!data)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = enter(fn, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    event_waiter w;
    waiter_add(&w);
    for (;;) {
        if (g_init_count == 0 || !g_state) {
            rc = NVML_ERROR_UNINITIALIZED;
            break;
        }
        struct nvmlEventSet_st *s = find_set(set);
        if (!s) {
            rc = NVML_ERROR_INVALID_ARGUMENT;
            break;
        }
        int dev;
        const xid_t *x;
        if (take_event(s, g_state, state_time(g_state), &dev, &x)) {
            data->device = phys_handle(dev);
            data->eventType = NVML_EVENT_TYPE_XID_CRITICAL;
            data->eventData = x->xid;
            data->gpuInstanceId = NVML_INSTANCE_ID_NONE;
            data->computeInstanceId = NVML_INSTANCE_ID_NONE;
            rc = NVML_SUCCESS;
            break;
        }
        double left = deadline - mono_now();
        if (left <= 0) {
            rc = NVML_ERROR_TIMEOUT;
            break;
        }
        double step = next_event_in(s, g_state);
        if (step > left)
            step = left;
        int watch_fd = -1;
        if (step > WAIT_STEP_S) { /* a short step is slept out; a long one watches the file */
            int fresh;
            if (w.wake_fd < 0)
                w.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
            if (w.wake_fd >= 0 && watch_state_file(&fresh)) {
                watch_fd = g_watch_fd;
                if (fresh && refresh_locked(1) == 0)
                    continue; /* a change from before the watch began is seen now */
            } else {
                step = WAIT_STEP_S;
            }
        }
        pthread_mutex_unlock(&g_lock);
        waiter_sleep(&w, watch_fd, step);
        pthread_mutex_lock(&g_lock);
        if (g_init_count == 0)
            continue;
        if (state_file_named()) {
            refresh_locked(1);
            wake_waiters_locked(); /* the others' wake-up was taken with the events */
        } else {
            refresh_locked(0);
        }
    }
    waiter_remove(&w);
    pthread_mutex_unlock(&g_lock);
    if (w.wake_fd >= 0)
        close(w.wake_fd);
    return rc;
}

NVML_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return event_wait(__func__, set, data, timeoutms);
}

NVML_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_v1_t *data, unsigned int timeoutms)
{
    nvmlEventData_t full;
    if (!data)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = event_wait(__func__, set, &full, timeoutms);
    if (rc == NVML_SUCCESS) {
        data->device = full.device;
        data->eventType = full.eventType;
        data->eventData = full.eventData;
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* MIG                                                                      */
/* ------------------------------------------------------------------------ */

NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    call_t c;
    nvmlReturn_t rc = enter_physical(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!currentMode || !pendingMode)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.dev->mig_mode.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *currentMode = *pendingMode = c.dev->mig_mode.v != 0;
    return leave(NVML_SUCCESS);
}

static unsigned int max_mig_devices(const fake_dev *d)
{
    return d->mig_max.present ? to_uint(d->mig_max.v) : DEFAULT_MAX_MIG_DEVICES;
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    call_t c;
    nvmlReturn_t rc = enter_physical(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.dev->mig_mode.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *count = max_mig_devices(c.dev);
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                          nvmlDevice_t *migDevice)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!migDevice || c.mig >= 0)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.dev->mig_mode.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    if (index >= max_mig_devices(c.dev))
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (c.dev->mig_mode.v == 0 || index >= (unsigned int)c.dev->migs.n)
        return leave(NVML_ERROR_NOT_FOUND);
    *migDevice = mig_handle(c.index, (int)index);
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!isMigDevice)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *isMigDevice = c.mig >= 0;
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, migDevice, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!device || c.mig < 0)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *device = phys_handle(c.index);
    return leave(NVML_SUCCESS);
}

static nvmlReturn_t get_instance_id(const char *fn, nvmlDevice_t h, size_t offset, unsigned int *id)
{
    call_t c;
    nvmlReturn_t rc = enter_device(fn, h, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!id)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    const num_t *n = dev_member(c.dev, offset);
    if (c.mig < 0 || !n->present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *id = to_uint(n->v);
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return get_instance_id(__func__, device, offsetof(fake_dev, gpu_instance_id), id);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return get_instance_id(__func__, device, offsetof(fake_dev, compute_instance_id), id);
}

/* ------------------------------------------------------------------------ */
/* Field values                                                             */
/* ------------------------------------------------------------------------ */

static const field_t *find_field(const fake_dev *d, unsigned int id, unsigned int scope)
{
    const field_t *f = d->fields.items;
    for (int i = 0; i < d->fields.n; i++)
        if (f[i].id == id && f[i].scope == scope)
            return &f[i];
    return NULL;
}

static void store_value(nvmlFieldValue_t *out, unsigned int type, double v)
{
    out->valueType = type;
    memset(&out->value, 0, sizeof out->value);
    switch (type) {
    case NVML_VALUE_TYPE_DOUBLE: out->value.dVal = v; break;
    /* 32-bit counters wrap, as NVML documents for the PCIe byte counters */
    case NVML_VALUE_TYPE_UNSIGNED_INT: out->value.uiVal = (unsigned int)(to_ull(v) & 0xFFFFFFFFull); break;
    case NVML_VALUE_TYPE_UNSIGNED_LONG: out->value.ulVal = (unsigned long)to_ull(v); break;
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: out->value.ullVal = to_ull(v); break;
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG: out->value.sllVal = to_ll(v); break;
    case NVML_VALUE_TYPE_SIGNED_INT: out->value.siVal = to_int(v); break;
    case NVML_VALUE_TYPE_UNSIGNED_SHORT: out->value.usVal = (unsigned short)(to_uint(v) & 0xFFFFu); break;
    default: break;
    }
}

NVML_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (valuesCount < 0 || (valuesCount > 0 && !values))
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    long long stamp = state_unix_us(c.st, c.t);
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        const field_t *f = find_field(c.dev, v->fieldId, v->scopeId);
        v->timestamp = stamp;
        v->latencyUsec = 0;
        if (!f) {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            memset(&v->value, 0, sizeof v->value);
            continue;
        }
        double value = f->is_counter ? ctr_value(&f->ctr, c.t) : sig_value(&f->sig, c.t);
        store_value(v, f->value_type, value);
        v->nvmlReturn = NVML_SUCCESS;
    }
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------ */
/* NVLink                                                                   */
/* ------------------------------------------------------------------------ */

/* Entry for per-link queries; on success *link_out is the link, lock held. */
static nvmlReturn_t enter_link(const char *fn, nvmlDevice_t h, unsigned int link, call_t *c,
                               const nvlink_t **link_out)
{
    nvmlReturn_t rc = enter_device(fn, h, c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!c->dev->nvlinks.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    if (link >= (unsigned int)c->dev->nvlinks.n)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *link_out = (const nvlink_t *)c->dev->nvlinks.items + link;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, unsigned int *isActive)
{
    call_t c;
    const nvlink_t *l;
    nvmlReturn_t rc = enter_link(__func__, device, link, &c, &l);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!isActive)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *isActive = l->active;
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int *version)
{
    call_t c;
    const nvlink_t *l;
    nvmlReturn_t rc = enter_link(__func__, device, link, &c, &l);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!version)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *version = l->version;
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    call_t c;
    const nvlink_t *l;
    nvmlReturn_t rc = enter_link(__func__, device, link, &c, &l);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!pci)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    return leave(fill_pci_info(pci, l->remote_bus, 0, 0));
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                          unsigned int *pNvLinkDeviceType)
{
    call_t c;
    const nvlink_t *l;
    nvmlReturn_t rc = enter_link(__func__, device, link, &c, &l);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!pNvLinkDeviceType)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *pNvLinkDeviceType = l->remote_type;
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------ */
/* PCIe                                                                     */
/* ------------------------------------------------------------------------ */

NVML_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *currLinkGen)
{
    return get_num_uint(__func__, device, offsetof(fake_dev, pcie_gen_current), currLinkGen);
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *currLinkWidth)
{
    return get_num_uint(__func__, device, offsetof(fake_dev, pcie_width_current), currLinkWidth);
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGen)
{
    return get_num_uint(__func__, device, offsetof(fake_dev, pcie_gen_max), maxLinkGen);
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *maxLinkWidth)
{
    return get_num_uint(__func__, device, offsetof(fake_dev, pcie_width_max), maxLinkWidth);
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGenDevice)
{
    return get_num_uint(__func__, device, offsetof(fake_dev, pcie_gen_gpu_max), maxLinkGenDevice);
}

/* Like the real call, takes a 20 ms sample (slept without the lock). */
NVML_API nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, unsigned int counter, unsigned int *value)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!value || counter > NVML_PCIE_UTIL_RX_BYTES)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    const signal_t *s = counter == NVML_PCIE_UTIL_TX_BYTES ? &c.dev->pcie_tx : &c.dev->pcie_rx;
    if (!s->present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    unsigned int sample = to_uint(sig_value(s, c.t));
    leave(NVML_SUCCESS);
    sleep_seconds(PCIE_SAMPLE_S);
    *value = sample;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Topology, affinity, P2P, fabric                                          */
/* ------------------------------------------------------------------------ */

NVML_API nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!node)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.dev->numa_node.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *node = (unsigned int)to_int(c.dev->numa_node.v); /* the binding reads a signed int */
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!cpuSet || cpuSetSize == 0)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.dev->cpu_present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    for (unsigned int i = 0; i < cpuSetSize; i++)
        cpuSet[i] = i < CPU_WORDS ? (unsigned long)c.dev->cpu_mask[i] : 0;
    return leave(NVML_SUCCESS);
}

/* Enters a call on two physical devices; on success the lock is held. */
static nvmlReturn_t enter_pair(const char *fn, nvmlDevice_t h1, nvmlDevice_t h2, call_t *c1, call_t *c2)
{
    nvmlReturn_t rc = enter_physical(fn, h1, c1);
    if (rc != NVML_SUCCESS)
        return rc;
    rc = resolve_locked(h2, c2);
    if (rc == NVML_SUCCESS && c2->mig >= 0)
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS && c1->index == c2->index)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    return rc == NVML_SUCCESS ? rc : leave(rc);
}

NVML_API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                          unsigned int *pathInfo)
{
    call_t a, b;
    nvmlReturn_t rc = enter_pair(__func__, device1, device2, &a, &b);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!pathInfo)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (a.dev->topo_set[b.index])
        *pathInfo = a.dev->topo[b.index];
    else if (b.dev->topo_set[a.index])
        *pathInfo = b.dev->topo[a.index];
    else
        return leave(NVML_ERROR_NOT_SUPPORTED);
    return leave(NVML_SUCCESS);
}

/* The first device's entry for the second, then the reverse, then each
 * side's "any" entry; OK when the scenario says nothing. */
static unsigned int p2p_status(const call_t *a, const call_t *b, unsigned int cap)
{
    if (a->dev->p2p_set[b->index])
        return a->dev->p2p[b->index][cap];
    if (b->dev->p2p_set[a->index])
        return b->dev->p2p[a->index][cap];
    if (a->dev->p2p_any_set)
        return a->dev->p2p_any[cap];
    if (b->dev->p2p_any_set)
        return b->dev->p2p_any[cap];
    return 0;
}

NVML_API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, unsigned int p2pIndex,
                                             unsigned int *p2pStatus)
{
    call_t a, b;
    nvmlReturn_t rc = enter_pair(__func__, device1, device2, &a, &b);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!p2pStatus || p2pIndex >= NVML_P2P_CAPS_INDEX_COUNT)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *p2pStatus = p2p_status(&a, &b, p2pIndex);
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *gpuFabricInfo)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!gpuFabricInfo)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    const fake_dev *d = c.dev;
    if (!d->fabric_present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    memcpy(gpuFabricInfo->clusterUuid, d->fabric_uuid, sizeof d->fabric_uuid);
    gpuFabricInfo->status = to_int(sig_value(&d->fabric_status, c.t));
    gpuFabricInfo->cliqueId = d->fabric_clique;
    gpuFabricInfo->state = to_uint(sig_value(&d->fabric_state, c.t));
    return leave(NVML_SUCCESS);
}

/* Versions 2 and 3; version 2 callers have no room for healthSummary. */
NVML_API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *gpuFabricInfo)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    nvmlGpuFabricInfoV_t *info = gpuFabricInfo;
    if (!info)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (info->version != NVML_GPU_FABRIC_INFO_V2 && info->version != NVML_GPU_FABRIC_INFO_V3)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    const fake_dev *d = c.dev;
    if (!d->fabric_present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    if (d->fabric_v2_only && info->version != NVML_GPU_FABRIC_INFO_V2)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    memcpy(info->clusterUuid, d->fabric_uuid, sizeof d->fabric_uuid);
    info->status = to_int(sig_value(&d->fabric_status, c.t));
    info->cliqueId = d->fabric_clique;
    info->state = to_uint(sig_value(&d->fabric_state, c.t));
    info->healthMask = to_uint(sig_value(&d->fabric_health_mask, c.t));
    if (info->version == NVML_GPU_FABRIC_INFO_V3)
        info->healthSummary = (unsigned char)to_uint(sig_value(&d->fabric_health_summary, c.t));
    return leave(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------ */
/* GPM: activity samples and the metrics between two of them               */
/* ------------------------------------------------------------------------ */
/*
 * A sample records, for a whole GPU or one of its GPU instances at simulated
 * time t, every GPM signal's value and its integral from 0 to t.
 * nvmlGpmMetricsGet averages each requested signal over the interval between
 * two samples (the signal's value when both were taken at the same simulated
 * time, as in a frozen scenario). Samples are the caller's, from
 * nvmlGpmSampleAlloc to nvmlGpmSampleFree, and outlive state reloads.
 */

#define GPM_MIN_ARCHITECTURE 9 /* NVML_DEVICE_ARCH_HOPPER */
#define GPM_WHOLE_GPU -1

struct nvmlGpmSample_st {
    struct nvmlGpmSample_st *next;
    int filled;
    int index;        /* physical device */
    int gpu_instance; /* GPM_WHOLE_GPU or the GPU instance id */
    double t;
    unsigned char present[NVML_GPM_METRIC_MAX];
    double value[NVML_GPM_METRIC_MAX];
    double integral[NVML_GPM_METRIC_MAX];
    double load_graphics, load_sm, load_mem; /* what live processes added at t */
};

static struct nvmlGpmSample_st *g_gpm_samples; /* live samples, guarded by g_lock */

/* "gpm <metric id> <signal>" */
static int parse_gpm(parser_t *p, char **cur)
{
    unsigned int id;
    if (tok_uint(cur, &id) != 0 || id == 0 || id >= NVML_GPM_METRIC_MAX)
        return p->why = "gpm: bad metric id", -1;
    fake_dev *d = p->dev;
    if (!d->gpm) {
        d->gpm = arena_alloc(&p->st->arena, sizeof(signal_t) * NVML_GPM_METRIC_MAX);
        if (!d->gpm)
            return p->why = "out of memory", -1;
    }
    if (d->gpm[id].present)
        return p->why = "gpm: metric given twice", -1;
    return parse_signal(p, cur, &d->gpm[id]);
}

static int gpm_supported(const fake_dev *phys)
{
    if (phys->gpm_supported.present)
        return phys->gpm_supported.v != 0;
    return phys->architecture.present && phys->architecture.v >= GPM_MIN_ARCHITECTURE;
}

/* Lock held. The live sample a handle names, or NULL. */
static struct nvmlGpmSample_st *find_sample(nvmlGpmSample_t h)
{
    for (struct nvmlGpmSample_st *s = g_gpm_samples; s; s = s->next)
        if (s == h)
            return s;
    return NULL;
}

/* The MIG device of GPU instance gi on a physical device, or NULL. */
static const fake_dev *gpu_instance_dev(const fake_dev *phys, unsigned int gi)
{
    const fake_dev *m = phys->migs.items;
    for (int j = 0; j < phys->migs.n; j++)
        if (m[j].gpu_instance_id.present && to_uint(m[j].gpu_instance_id.v) == gi)
            return &m[j];
    return NULL;
}

/* Where the scenario asks (load_from_processes on the physical GPU), the live
 * processes of d add their SM share to graphics activity, their sm_activity
 * (else their SM share) to SM activity and their memory share to DRAM
 * bandwidth, as they add to the utilization rates. */
static void gpm_process_load(const fake_dev *phys, const fake_dev *d, struct nvmlGpmSample_st *s)
{
    s->load_graphics = s->load_sm = s->load_mem = 0.0;
    if (!phys->load_from_processes.present || phys->load_from_processes.v == 0)
        return;
    const proc_t *p = d->procs.items;
    for (int i = 0; i < d->procs.n; i++) {
        if (proc_visible(p + i)) {
            s->load_graphics += p[i].sm;
            s->load_sm += p[i].sm_activity_set ? p[i].sm_activity : p[i].sm;
            s->load_mem += p[i].mem;
        }
    }
}

/* The process share a metric gets (see gpm_process_load). */
static double gpm_load_of(const struct nvmlGpmSample_st *s, unsigned int id)
{
    switch (id) {
    case 1: return s->load_graphics;
    case 2: return s->load_sm;
    case 10: return s->load_mem; /* DRAM bandwidth */
    default: return 0.0;
    }
}

/* Lock held. Records the GPM signals of d at the call's time into s. */
static void fill_sample(struct nvmlGpmSample_st *s, const call_t *c, const fake_dev *d, int gpu_instance)
{
    gpm_process_load(c->phys, d, s);
    s->filled = 1;
    s->index = c->index;
    s->gpu_instance = gpu_instance;
    s->t = c->t;
    for (int id = 0; id < NVML_GPM_METRIC_MAX; id++) {
        const signal_t *sig = d->gpm ? &d->gpm[id] : NULL;
        s->present[id] = sig && sig->present;
        s->value[id] = s->present[id] ? sig_value(sig, c->t) : 0.0;
        s->integral[id] = s->present[id] ? sig_integral(sig, c->t) : 0.0;
    }
}

NVML_API nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport)
{
    call_t c;
    nvmlReturn_t rc = enter_device(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!gpmSupport)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    gpmSupport->isSupportedDevice = (unsigned int)gpm_supported(c.phys);
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample)
{
    call_t c;
    nvmlReturn_t rc = enter(__func__, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!gpmSample)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    struct nvmlGpmSample_st *s = calloc(1, sizeof *s);
    if (!s)
        return leave(NVML_ERROR_MEMORY);
    s->next = g_gpm_samples;
    g_gpm_samples = s;
    *gpmSample = s;
    return leave(NVML_SUCCESS);
}

/* Only releases memory: like the real one, it works after nvmlShutdown too. */
NVML_API nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample)
{
    pthread_mutex_lock(&g_lock);
    for (struct nvmlGpmSample_st **link = &g_gpm_samples; *link; link = &(*link)->next) {
        if (*link == gpmSample) {
            *link = gpmSample->next;
            free(gpmSample);
            return leave(NVML_SUCCESS);
        }
    }
    return leave(NVML_ERROR_INVALID_ARGUMENT);
}

NVML_API nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample)
{
    call_t c;
    nvmlReturn_t rc = enter_physical(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    struct nvmlGpmSample_st *s = find_sample(gpmSample);
    if (!s)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!gpm_supported(c.phys))
        return leave(NVML_ERROR_NOT_SUPPORTED);
    fill_sample(s, &c, c.dev, GPM_WHOLE_GPU);
    return leave(NVML_SUCCESS);
}

/* On the physical device's handle, for the GPU instance with that id. */
NVML_API nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId,
                                          nvmlGpmSample_t gpmSample)
{
    call_t c;
    nvmlReturn_t rc = enter_physical(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    struct nvmlGpmSample_st *s = find_sample(gpmSample);
    if (!s)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!gpm_supported(c.phys) || !c.dev->mig_mode.present || c.dev->mig_mode.v == 0)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    const fake_dev *gi = gpu_instance_dev(c.dev, gpuInstanceId);
    if (!gi)
        return leave(NVML_ERROR_NOT_FOUND);
    fill_sample(s, &c, gi, (int)gpuInstanceId);
    return leave(NVML_SUCCESS);
}

static int gpm_is_bandwidth(unsigned int id)
{
    return id == 20 || id == 21 || (id >= 60 && id <= 97) || (id >= 100 && id <= 159) ||
           (id >= 212 && id <= 247);
}

/* The fake's own names for metricInfo; the real library's are not recorded yet. */
static void describe_gpm_metric(unsigned int id, nvmlGpmMetric_t *m)
{
    static const char *const names[][2] = {
        [1] = {"graphics_util", "Graphics engine activity"},
        [2] = {"sm_util", "SM activity"},
        [3] = {"sm_occupancy", "SM occupancy"},
        [4] = {"integer_util", "Integer pipe activity"},
        [5] = {"any_tensor_util", "Tensor pipe activity (any)"},
        [6] = {"dfma_tensor_util", "DFMA tensor pipe activity"},
        [7] = {"hmma_tensor_util", "HMMA tensor pipe activity"},
        [8] = {"dmma_tensor_util", "DMMA tensor pipe activity"},
        [9] = {"imma_tensor_util", "IMMA tensor pipe activity"},
        [10] = {"dram_bw_util", "DRAM bandwidth utilization"},
        [11] = {"fp64_util", "FP64 pipe activity"},
        [12] = {"fp32_util", "FP32 pipe activity"},
        [13] = {"fp16_util", "FP16 pipe activity"},
        [20] = {"pcie_tx_per_sec", "PCIe transmit bandwidth"},
        [21] = {"pcie_rx_per_sec", "PCIe receive bandwidth"},
    };
    const int known = id < sizeof names / sizeof names[0] && names[id][0];
    int bandwidth = gpm_is_bandwidth(id);
    m->metricInfo.shortName = known ? names[id][0] : bandwidth ? "bandwidth" : "metric";
    m->metricInfo.longName = known ? names[id][1] : bandwidth ? "Bandwidth" : "Metric";
    m->metricInfo.unit = bandwidth ? "MiB/sec" : "%";
}

/* Lock held on entry when it succeeds. Checks the request, then enters the
 * samples' device like any device call (delay, lost GPU, injected error). */
static nvmlReturn_t enter_metrics(const char *fn, nvmlGpmMetricsGet_t *m, call_t *c,
                                  const struct nvmlGpmSample_st **a, const struct nvmlGpmSample_st **b)
{
    nvmlReturn_t rc = lock_initialized();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!m)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (m->version != NVML_GPM_METRICS_GET_VERSION)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    *a = find_sample(m->sample1);
    *b = find_sample(m->sample2);
    if (m->numMetrics > NVML_GPM_METRIC_MAX || !*a || !*b || !(*a)->filled || !(*b)->filled ||
        (*a)->index != (*b)->index || (*a)->gpu_instance != (*b)->gpu_instance || (*b)->t < (*a)->t)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    int index = (*a)->index;
    leave(NVML_SUCCESS);
    rc = enter_device(fn, phys_handle(index), c);
    if (rc != NVML_SUCCESS)
        return rc;
    *a = find_sample(m->sample1); /* the caller may have freed them meanwhile */
    *b = find_sample(m->sample2);
    return *a && *b ? NVML_SUCCESS : leave(NVML_ERROR_INVALID_ARGUMENT);
}

NVML_API nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet)
{
    call_t c;
    const struct nvmlGpmSample_st *a, *b;
    nvmlReturn_t rc = enter_metrics(__func__, metricsGet, &c, &a, &b);
    if (rc != NVML_SUCCESS)
        return rc;
    double dt = b->t - a->t;
    for (unsigned int i = 0; i < metricsGet->numMetrics; i++) {
        nvmlGpmMetric_t *out = &metricsGet->metrics[i];
        unsigned int id = out->metricId;
        out->value = 0.0;
        memset(&out->metricInfo, 0, sizeof out->metricInfo);
        if (id == 0 || id >= NVML_GPM_METRIC_MAX) {
            out->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
            continue;
        }
        describe_gpm_metric(id, out);
        if (!a->present[id] || !b->present[id]) {
            out->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            continue;
        }
        double average = dt > 0 ? (b->integral[id] - a->integral[id]) / dt : b->value[id];
        double load = gpm_load_of(b, id); /* the processes seen at the second sample */
        out->value = load > 0 && average + load > 100.0 ? 100.0 : average + load;
        out->nvmlReturn = NVML_SUCCESS;
    }
    return leave(NVML_SUCCESS);
}

_Static_assert(sizeof(nvmlGpmSupport_t) == 8, "nvmlGpmSupport_t layout");
_Static_assert(sizeof(nvmlGpmMetric_t) == 40, "nvmlGpmMetric_t layout");
_Static_assert(offsetof(nvmlGpmMetricsGet_t, metrics) == 24, "nvmlGpmMetricsGet_t layout");
_Static_assert(sizeof(nvmlGpmMetricsGet_t) == 24 + 40 * NVML_GPM_METRIC_MAX, "nvmlGpmMetricsGet_t size");
/* ---- end GPM ------------------------------------------------------------- */

/* ------------------------------------------------------------------------ */
/* Board facts other monitoring tools read (nvidia-smi, DCGM, nvitop)        */
/* ------------------------------------------------------------------------ */
/* A key the scenario leaves out answers NVML_ERROR_NOT_SUPPORTED, as the real
 * driver does for a board without the feature (no fans on a passively cooled
 * board, no driver model outside Windows): the symbol itself is always there. */

/* Reads one number key of the device or MIG device behind h. */
static nvmlReturn_t enter_num(const char *fn, nvmlDevice_t h, int physical_only, size_t offset, void *out,
                              call_t *c, const num_t **n)
{
    nvmlReturn_t rc = physical_only ? enter_physical(fn, h, c) : enter_device(fn, h, c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!out)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *n = dev_member(c->dev, offset);
    if (!(*n)->present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    return NVML_SUCCESS;
}

static nvmlReturn_t get_phys_uint(const char *fn, nvmlDevice_t h, size_t offset, unsigned int *out)
{
    call_t c;
    const num_t *n;
    nvmlReturn_t rc = enter_num(fn, h, 1, offset, out, &c, &n);
    if (rc != NVML_SUCCESS)
        return rc;
    *out = to_uint(n->v);
    return leave(NVML_SUCCESS);
}

#define PHYS_UINT_GETTER(name, member, type)                                                                    \
    NVML_API nvmlReturn_t name(nvmlDevice_t device, type *out)                                                  \
    {                                                                                                           \
        return get_phys_uint(__func__, device, offsetof(fake_dev, member), (unsigned int *)out);                \
    }

PHYS_UINT_GETTER(nvmlDeviceGetNumFans, fan_count, unsigned int)
PHYS_UINT_GETTER(nvmlDeviceGetPersistenceMode, persistence_mode, unsigned int)
PHYS_UINT_GETTER(nvmlDeviceGetComputeMode, compute_mode, unsigned int)
PHYS_UINT_GETTER(nvmlDeviceGetDisplayMode, display_mode, unsigned int)
PHYS_UINT_GETTER(nvmlDeviceGetDisplayActive, display_active, unsigned int)
PHYS_UINT_GETTER(nvmlDeviceGetBrand, brand, unsigned int)
PHYS_UINT_GETTER(nvmlDeviceGetPowerManagementDefaultLimit, power_limit_default, unsigned int)
PHYS_UINT_GETTER(nvmlDeviceGetNumGpuCores, gpu_cores, unsigned int)
PHYS_UINT_GETTER(nvmlDeviceGetMemoryBusWidth, memory_bus_width, unsigned int)

NVML_API nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory)
{
    call_t c;
    const num_t *total;
    nvmlReturn_t rc = enter_num(__func__, device, 0, offsetof(fake_dev, bar1_total), bar1Memory, &c, &total);
    if (rc != NVML_SUCCESS)
        return rc;
    unsigned long long size = to_ull(total->v);
    unsigned long long used = c.dev->bar1_used.present ? to_ull(sig_value(&c.dev->bar1_used, c.t)) : 0;
    if (used > size)
        used = size;
    *bar1Memory = (nvmlBAR1Memory_t){size, size - used, used};
    return leave(NVML_SUCCESS);
}

static nvmlReturn_t fan_speed(const char *fn, nvmlDevice_t h, unsigned int fan, unsigned int *speed)
{
    call_t c;
    const num_t *count;
    nvmlReturn_t rc = enter_num(fn, h, 1, offsetof(fake_dev, fan_count), speed, &c, &count);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!c.dev->fan_speed.present || count->v < 1)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    if (fan >= to_uint(count->v))
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *speed = to_uint(sig_value(&c.dev->fan_speed, c.t));
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    return fan_speed(__func__, device, 0, speed);
}

NVML_API nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t device, unsigned int fan, unsigned int *speed)
{
    return fan_speed(__func__, device, fan, speed);
}

static nvmlReturn_t driver_model(const char *fn, nvmlDevice_t h, unsigned int *current, unsigned int *pending)
{
    call_t c;
    const num_t *model;
    nvmlReturn_t rc = enter_num(fn, h, 1, offsetof(fake_dev, driver_model), current, &c, &model);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!pending)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *current = *pending = to_uint(model->v);
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetDriverModel(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
    return driver_model(__func__, device, current, pending);
}

NVML_API nvmlReturn_t nvmlDeviceGetDriverModel_v2(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
    return driver_model(__func__, device, current, pending);
}

NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    call_t c;
    const num_t *n;
    nvmlReturn_t rc = enter_num(__func__, device, 0, offsetof(fake_dev, cc_major), major, &c, &n);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!minor)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *major = to_int(n->v);
    *minor = c.dev->cc_minor.present ? to_int(c.dev->cc_minor.v) : 0;
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature)
{
    if (!temperature)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (temperature->version != NVML_TEMPERATURE_V1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    call_t c;
    nvmlReturn_t rc = enter_physical(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    if (temperature->sensorType != NVML_TEMPERATURE_GPU)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.dev->temperature.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    temperature->temperature = to_int(sig_value(&c.dev->temperature, c.t));
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t device, nvmlConfComputeMemSizeInfo_t *memInfo)
{
    call_t c;
    const num_t *protected_kib;
    nvmlReturn_t rc =
        enter_num(__func__, device, 1, offsetof(fake_dev, conf_protected_kib), memInfo, &c, &protected_kib);
    if (rc != NVML_SUCCESS)
        return rc;
    memInfo->protectedMemSizeKib = to_ull(protected_kib->v);
    memInfo->unprotectedMemSizeKib = c.dev->conf_unprotected_kib.present ? to_ull(c.dev->conf_unprotected_kib.v) : 0;
    return leave(NVML_SUCCESS);
}

NVML_API nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length)
{
    return get_dev_str(__func__, device, offsetof(fake_dev, board_part_number), partNumber, length);
}

NVML_API nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    return get_dev_str(__func__, device, offsetof(fake_dev, vbios_version), version, length);
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
                                                                   unsigned int *maxLimit)
{
    call_t c;
    const num_t *lo;
    nvmlReturn_t rc = enter_num(__func__, device, 1, offsetof(fake_dev, power_limit_min), minLimit, &c, &lo);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!maxLimit)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.dev->power_limit_max.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *minLimit = to_uint(lo->v);
    *maxLimit = to_uint(c.dev->power_limit_max.v);
    return leave(NVML_SUCCESS);
}

/* NVLink error counters are the per-link field values the backend reads too
 * (NVML_FI_DEV_NVLINK_ERROR_DL_*), so both views of one link always agree.
 * Data CRC counts are not kept by NVLink 4 and newer. */
static const unsigned int NVLINK_ERROR_FIELDS[NVML_NVLINK_ERROR_DL_COUNT] = {
    161, /* DL_REPLAY: NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY */
    162, /* DL_RECOVERY: NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY */
    163, /* DL_CRC_FLIT: NVML_FI_DEV_NVLINK_ERROR_DL_CRC */
    0,   /* DL_CRC_DATA */
    160, /* DL_ECC_DATA: NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL */
};

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link, unsigned int counter,
                                                      unsigned long long *counterValue)
{
    call_t c;
    const nvlink_t *l;
    nvmlReturn_t rc = enter_link(__func__, device, link, &c, &l);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!counterValue || counter >= NVML_NVLINK_ERROR_DL_COUNT)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    const field_t *f = NVLINK_ERROR_FIELDS[counter] ? find_field(c.dev, NVLINK_ERROR_FIELDS[counter], link) : NULL;
    if (!f)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *counterValue = to_ull(f->is_counter ? ctr_value(&f->ctr, c.t) : sig_value(&f->sig, c.t));
    return leave(NVML_SUCCESS);
}

/* Clock-event reason bits that count as each performance policy's violation
 * (nvmlPerfPolicyType_t order; RELIABILITY has no reason bit of its own). */
static unsigned long long policy_reasons(unsigned int policy)
{
    switch (policy) {
    case 0: return 0x4ull | 0x80ull;        /* POWER: SW power cap, HW power brake */
    case 1: return 0x20ull | 0x40ull;       /* THERMAL: SW and HW thermal slowdown */
    case 2: return 0x10ull;                 /* SYNC_BOOST */
    case 3: return 0x8ull;                  /* BOARD_LIMIT: HW slowdown */
    case 4: return 0x1ull;                  /* LOW_UTILIZATION: GPU idle */
    case 5: return 0;                       /* RELIABILITY */
    case 10:                                /* TOTAL_APP_CLOCKS */
    case 11: return 0x2ull | 0x4ull | 0x8ull | 0x10ull | 0x20ull | 0x40ull | 0x80ull; /* TOTAL_BASE_CLOCKS */
    default: return ~0ull;
    }
}

/* Seconds within [a, b] during which a step curve's value has one of `bits` set. */
static double held_in(const keyframe_t *k, int n, unsigned long long bits, double a, double b)
{
    double total = 0.0;
    for (int i = -1; i < n; i++) {
        double t0 = i < 0 ? -1e300 : k[i].t, t1 = i + 1 < n ? k[i + 1].t : 1e300;
        double v = k[i < 0 ? 0 : i].v;
        double lo = a > t0 ? a : t0, hi = b < t1 ? b : t1;
        if (hi > lo && (to_ull(v) & bits))
            total += hi - lo;
    }
    return total;
}

/* Seconds of [0, t] during which the reason signal had one of `bits` set
 * (a bit mask does not interpolate: keyframes are held as steps). */
static double reasons_held_seconds(const signal_t *s, unsigned long long bits, double t)
{
    if (!(t > 0))
        return 0.0;
    if (s->nkf == 0)
        return (to_ull(s->constant) & bits) ? t : 0.0;
    if (s->period <= 0)
        return held_in(s->kf, s->nkf, bits, 0.0, t);
    double cycles = dfloor(t / s->period);
    return cycles * held_in(s->kf, s->nkf, bits, 0.0, s->period) +
           held_in(s->kf, s->nkf, bits, 0.0, t - cycles * s->period);
}

NVML_API nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t device, unsigned int perfPolicyType,
                                                   nvmlViolationTime_t *violTime)
{
    call_t c;
    nvmlReturn_t rc = enter_physical(__func__, device, &c);
    if (rc != NVML_SUCCESS)
        return rc;
    unsigned long long bits = policy_reasons(perfPolicyType);
    if (!violTime || bits == ~0ull)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!c.dev->clocks_event_reasons.present)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    violTime->referenceTime = to_ull(realtime_now() * 1e6);
    violTime->violationTime = to_ull(reasons_held_seconds(&c.dev->clocks_event_reasons, bits, c.t) * 1e9);
    return leave(NVML_SUCCESS);
}
/* ---- end board facts ----------------------------------------------------- */

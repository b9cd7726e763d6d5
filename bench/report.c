/* The report: an aligned table for people, one JSON object per line for tools. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MIB (1024.0 * 1024.0)

const char *bench_format_seconds(double s, char *buf, size_t size) {
  if (s <= 0.0)
    snprintf(buf, size, "-");
  else if (s < 1e-6)
    snprintf(buf, size, "%.0f ns", s * 1e9);
  else if (s < 1e-3)
    snprintf(buf, size, "%.1f us", s * 1e6);
  else if (s < 1.0)
    snprintf(buf, size, "%.2f ms", s * 1e3);
  else
    snprintf(buf, size, "%.2f s", s);
  return buf;
}

static const char *metric_name(bench_metric m) {
  switch (m) {
  case BENCH_BANDWIDTH: return "bandwidth";
  case BENCH_FLOPS: return "flops";
  case BENCH_LATENCY: return "latency";
  case BENCH_COMPILE: return "compile";
  }
  return "?";
}

static const char *rate_unit(bench_metric m) {
  switch (m) {
  case BENCH_BANDWIDTH: return "GB/s";
  case BENCH_FLOPS: return "GFLOP/s";
  case BENCH_LATENCY: return "us/call";
  case BENCH_COMPILE: return "ms/call";
  }
  return "?";
}

/* Where the first call's kernels came from: "compiled 3", "disk 2", "memory 1". */
static const char *first_cache_text(const bench_result *r, char *buf, size_t size) {
  if (r->first_kernels_compiled && r->first_disk_hits)
    snprintf(buf, size, "disk %llu+new %llu", (unsigned long long)r->first_disk_hits,
             (unsigned long long)r->first_kernels_compiled);
  else if (r->first_kernels_compiled)
    snprintf(buf, size, "compiled %llu", (unsigned long long)r->first_kernels_compiled);
  else if (r->first_disk_hits)
    snprintf(buf, size, "disk %llu", (unsigned long long)r->first_disk_hits);
  else if (r->first_memory_hits)
    snprintf(buf, size, "memory %llu", (unsigned long long)r->first_memory_hits);
  else
    snprintf(buf, size, "no kernels");
  return buf;
}

/* "192.0 MiB", "12.0 KiB" */
static const char *bytes_text(uint64_t bytes, char *buf, size_t size) {
  if (bytes >= 1024u * 1024u)
    snprintf(buf, size, "%.1f MiB", (double)bytes / MIB);
  else
    snprintf(buf, size, "%.1f KiB", (double)bytes / 1024.0);
  return buf;
}

static const char *ratio_text(double numerator, double denominator, char *buf, size_t size) {
  if (numerator > 0.0 && denominator > 0.0)
    snprintf(buf, size, "%.2fx", numerator / denominator);
  else
    snprintf(buf, size, "-");
  return buf;
}

void bench_print_limits(FILE *out, const bench_limits *limits) {
  if (limits->device_gbs > 0) {
    fprintf(out, "device limits: peak memory bandwidth %.1f GB/s (memory clock x bus width)\n",
            limits->device_gbs);
    return;
  }
  if (limits->copy_gbs <= 0.0 && limits->triad_gbs <= 0.0 && limits->sgemm_gflops <= 0.0) {
    fprintf(out, "machine limits (%d threads): not measured\n", limits->threads);
    return;
  }
  fprintf(out,
          "machine limits (%d threads): copy %.1f GB/s, triad %.1f GB/s (64M floats, best of "
          "5); OpenBLAS SGEMM 2048^3 %.1f GFLOP/s\n",
          limits->threads, limits->copy_gbs, limits->triad_gbs, limits->sgemm_gflops);
}

#define ROW_FORMAT "%-32s %10s %10s %-14s %18s %6s %9s %10s %9s %9s %9s\n"

static void print_header(FILE *out) {
  fprintf(out, ROW_FORMAT, "workload", "median", "first", "first from", "rate", "limit",
          "kern/call", "peak", "unfused/", "generic/", "loom/");
  fprintf(out, ROW_FORMAT, "", "", "", "", "", "", "", "", "fused", "special", "BLAS");
}

static void print_row(FILE *out, const bench_result *r, const bench_limits *limits) {
  char median[32], first[32], cache[64], rate[48], limit[16], kernels[24], peak[24], unfused[16],
      generic[16], direct[16];
  if (r->status != LOOM_OK) {
    fprintf(out, "%-32s FAILED: %s\n", r->workload->name, r->error);
    return;
  }
  snprintf(rate, sizeof rate, "%.2f %s", bench_rate(r), rate_unit(r->workload->metric));
  double percent = bench_percent_of_limit(r, limits);
  if (percent >= 0.0)
    snprintf(limit, sizeof limit, "%.0f%%", percent);
  else
    snprintf(limit, sizeof limit, "-");
  if (r->has_peak)
    bytes_text(r->peak_bytes, peak, sizeof peak);
  else
    snprintf(peak, sizeof peak, "-");
  snprintf(kernels, sizeof kernels, "%.2f", r->kernels_per_call);
  fprintf(out, ROW_FORMAT, r->workload->name,
          bench_format_seconds(r->median_s, median, sizeof median),
          bench_format_seconds(r->first_s, first, sizeof first),
          first_cache_text(r, cache, sizeof cache), rate, limit, kernels, peak,
          ratio_text(r->unfused_median_s, r->median_s, unfused, sizeof unfused),
          ratio_text(r->generic_median_s, r->median_s, generic, sizeof generic),
          ratio_text(r->median_s, r->direct_s, direct, sizeof direct));
}

void bench_print_table_header(FILE *out, const bench_limits *limits) {
  bench_print_limits(out, limits);
  print_header(out);
  fflush(out);
}

void bench_print_table_row(FILE *out, const bench_result *r, const bench_limits *limits) {
  print_row(out, r, limits);
  fflush(out);
}

void bench_print_table_notes(FILE *out, const bench_result *results, int n) {
  for (int i = 0; i < n; i++)
    if (results[i].note[0]) fprintf(out, "  %s: %s\n", results[i].workload->name, results[i].note);
}

/* ------------------------------------------------------------------ JSON */

static void print_json_line(FILE *out, json_t *o) {
  char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  if (text) fprintf(out, "%s\n", text);
  free(text);
  json_decref(o);
}

void bench_print_json_limits(FILE *out, const bench_limits *limits) {
  bool measured = limits->copy_gbs > 0.0 || limits->triad_gbs > 0.0 || limits->sgemm_gflops > 0.0;
  print_json_line(out,
                  json_pack("{s:s, s:b, s:i, s:f, s:f, s:f}", "kind", "limits", "measured",
                            measured, "threads", limits->threads, "copy_gbs", limits->copy_gbs,
                            "triad_gbs", limits->triad_gbs, "sgemm_gflops", limits->sgemm_gflops));
}

static void set_real(json_t *o, const char *key, double value) {
  json_object_set_new(o, key, json_real(value));
}

static void set_count(json_t *o, const char *key, uint64_t value) {
  json_object_set_new(o, key, json_integer((json_int_t)value));
}

static void add_optional_measures(json_t *o, const bench_result *r) {
  if (r->has_peak) {
    set_count(o, "peak_bytes", r->peak_bytes);
    set_count(o, "live_before_bytes", r->live_before_bytes);
  }
  if (r->unfused_median_s > 0.0) {
    set_real(o, "unfused_median_s", r->unfused_median_s);
    set_real(o, "unfused_kernels_per_call", r->unfused_kernels_per_call);
    set_real(o, "unfused_over_fused", r->unfused_median_s / r->median_s);
  }
  if (r->generic_median_s > 0.0) {
    set_real(o, "generic_median_s", r->generic_median_s);
    set_real(o, "generic_over_specialized", r->generic_median_s / r->median_s);
  }
  if (r->direct_s > 0.0) {
    set_real(o, "direct_blas_s", r->direct_s);
    set_real(o, "loom_over_direct", r->median_s / r->direct_s);
  }
  if (r->note[0]) json_object_set_new(o, "note", json_string(r->note));
}

void bench_print_json_result(FILE *out, const bench_result *r, const bench_limits *limits) {
  json_t *o = json_object();
  if (!o) return;
  json_object_set_new(o, "kind", json_string("result"));
  json_object_set_new(o, "workload", json_string(r->workload->name));
  json_object_set_new(o, "metric", json_string(metric_name(r->workload->metric)));
  json_object_set_new(o, "ok", json_boolean(r->status == LOOM_OK));
  if (r->status != LOOM_OK) {
    json_object_set_new(o, "error", json_string(r->error));
    print_json_line(out, o);
    return;
  }
  char cache[64];
  set_real(o, "median_s", r->median_s);
  set_real(o, "first_s", r->first_s);
  json_object_set_new(o, "first_from", json_string(first_cache_text(r, cache, sizeof cache)));
  set_count(o, "first_kernels_compiled", r->first_kernels_compiled);
  set_count(o, "first_disk_cache_hits", r->first_disk_hits);
  set_count(o, "first_memory_cache_hits", r->first_memory_hits);
  set_real(o, "rate", bench_rate(r));
  json_object_set_new(o, "rate_unit", json_string(rate_unit(r->workload->metric)));
  double percent = bench_percent_of_limit(r, limits);
  if (percent >= 0.0) set_real(o, "percent_of_limit", percent);
  set_real(o, "kernels_per_call", r->kernels_per_call);
  set_real(o, "gemm_per_call", r->gemm_per_call);
  add_optional_measures(o, r);
  print_json_line(out, o);
}

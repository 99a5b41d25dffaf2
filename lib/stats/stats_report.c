/* SPDX-License-Identifier: BSD-3-Clause */
/* Statistics as JSON (schema: docs/stats.schema.json) and as a summary;
 * saving them to statsfile= is stats_save.c's. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "sect4k/sect4k.h"

static void
json_string (FILE *fp, const char *s)
{
  fputc ('"', fp);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf (fp, "\\%c", *s);
    else if ((unsigned char) *s < 0x20)
      fprintf (fp, "\\u%04x", *s);
    else
      fputc (*s, fp);
  }
  fputc ('"', fp);
}

static void
json_array (FILE *fp, const uint64_t *v, unsigned n)
{
  fputc ('[', fp);
  for (unsigned i = 0; i < n; i++)
    fprintf (fp, "%s%" PRIu64, i ? ", " : "", v[i]);
  fputc (']', fp);
}

/* Store bytes written per client byte written, or -1 if nothing was. */
static double
amplification (const struct s4k_op_stats *w)
{
  return w->bytes ? (double) w->store_write_bytes / w->bytes : -1;
}

int
s4k_stats_write_json (const struct s4k_dev *d, FILE *fp)
{
  const struct s4k_geometry *g = s4k_dev_geometry (d);
  struct s4k_stats s;
  char desc[256];

  s4k_dev_stats (d, &s);
  s4k_dev_describe (d, desc, sizeof desc);
  fprintf (fp, "{\n  \"schema\": \"sect4k-stats/1\",\n  \"version\": ");
  json_string (fp, S4K_VERSION);
  if (s4k_dev_name (d)) {       /* only with export=: one file per export */
    fprintf (fp, ",\n  \"export\": ");
    json_string (fp, s4k_dev_name (d));
  }
  fprintf (fp, ",\n  \"elapsed_seconds\": %.3f,\n", s.elapsed);
  fprintf (fp, "  \"geometry\": {\"size\": %" PRIu64 ", \"logical\": %" PRIu32
           ", \"physical\": %" PRIu32 ", \"alignment_offset\": %" PRIu32
           ", \"lowest_aligned\": %" PRIu64 ", \"description\": ",
           g->size, g->logical, g->physical, g->alignment,
           s4k_lowest_aligned (g));
  json_string (fp, desc);
  fprintf (fp, "},\n  \"size_buckets\": [");
  for (unsigned i = 0; i < S4K_SIZE_BUCKETS; i++)
    fprintf (fp, "%s%u", i ? ", " : "", i ? 256u << i : 0);
  fprintf (fp, "],\n  \"offset_bucket_bytes\": %" PRIu32 ",\n",
           s.offset_bucket);
  double wa = amplification (&s.op[S4K_OP_WRITE]);
  if (wa < 0)
    fprintf (fp, "  \"write_amplification\": null,\n");
  else
    fprintf (fp, "  \"write_amplification\": %.4f,\n", wa);
  if (s.upstream)
    fprintf (fp, "  \"upstream\": {\"losses\": %" PRIu64 "},\n",
             s.upstream_losses);
  fprintf (fp, "  \"ops\": {\n");
  for (unsigned i = 0; i < S4K_NOPS; i++) {
    const struct s4k_op_stats *o = &s.op[i];
    const char *sep = "";
    fprintf (fp, "    \"%s\": {", s4k_op_names[i]);
#define COUNTER(name, description)                                          \
    fprintf (fp, "%s\"" #name "\": %" PRIu64, sep, o->name), sep = ", ";
    S4K_OP_COUNTERS (COUNTER)
#undef COUNTER
    fprintf (fp, ",\n      \"size_hist\": ");
    json_array (fp, o->size_hist, S4K_SIZE_BUCKETS);
    fprintf (fp, ",\n      \"offset_hist\": ");
    json_array (fp, o->offset_hist, s.offset_buckets);
    fprintf (fp, ",\n      \"latency_hist\": ");
    json_array (fp, o->latency_hist, S4K_LATENCY_BUCKETS);
    fprintf (fp, "}%s\n", i + 1 < S4K_NOPS ? "," : "");
  }
  fprintf (fp, "  }\n}\n");
  return ferror (fp) ? -EIO : 0;
}

void
s4k_stats_print (const struct s4k_dev *d, FILE *fp)
{
  struct s4k_stats s;
  char desc[256];
  s4k_dev_stats (d, &s);
  s4k_dev_describe (d, desc, sizeof desc);
  if (s4k_dev_name (d))
    fprintf (fp, "sect4k statistics of export %s: %s, %.1f s\n",
             s4k_dev_name (d), desc, s.elapsed);
  else
    fprintf (fp, "sect4k statistics: %s, %.1f s\n", desc, s.elapsed);
  fprintf (fp, "%-8s %10s %14s %8s %10s %10s %10s %8s %10s\n", "op",
           "requests", "bytes", "errors", "phys-algn", "log-only", "unaligned",
           "refused", "rmw-sect");
  for (unsigned i = 0; i < S4K_NOPS; i++) {
    const struct s4k_op_stats *o = &s.op[i];
    if (!o->requests)
      continue;
    fprintf (fp, "%-8s %10" PRIu64 " %14" PRIu64 " %8" PRIu64 " %10" PRIu64
             " %10" PRIu64 " %10" PRIu64 " %8" PRIu64 " %10" PRIu64 "\n",
             s4k_op_names[i], o->requests, o->bytes, o->errors,
             o->aligned_physical, o->aligned_logical, o->unaligned,
             o->refused, o->rmw_sectors);
  }
  const struct s4k_op_stats *w = &s.op[S4K_OP_WRITE], *r = &s.op[S4K_OP_READ];
  double wa = amplification (w);
  fprintf (fp, "writes: %" PRIu64 " RMW sectors reading %" PRIu64 " bytes; "
           "store wrote %" PRIu64 " bytes for %" PRIu64 " client bytes",
           w->rmw_sectors, w->rmw_read_bytes, w->store_write_bytes, w->bytes);
  if (wa >= 0)
    fprintf (fp, " (write amplification %.2f)", wa);
  if (s.upstream)
    fprintf (fp, "\nupstream losses (writes acknowledged, not flushed, "
             "maybe gone): %" PRIu64, s.upstream_losses);
  fprintf (fp, "\nreads touching more physical sectors than their length "
           "needs: %" PRIu64 " of %" PRIu64 "\n", r->extra_sectors,
           r->requests);
  fprintf (fp, "write offsets within the physical sector (%" PRIu32
           "-byte buckets):", s.offset_bucket);
  for (unsigned i = 0; i < s.offset_buckets; i++)
    if (w->offset_hist[i])
      fprintf (fp, " +%" PRIu64 ":%" PRIu64, (uint64_t) i * s.offset_bucket,
               w->offset_hist[i]);
  fprintf (fp, "\n");
  for (unsigned i = 0; i < S4K_NOPS; i++) {
    const struct s4k_op_stats *o = &s.op[i];
    const double n = o->modelled_requests;
    if (n)
      fprintf (fp, "modelled %s: %" PRIu64 " requests, mean service %.0f us "
               "(base %.0f, transfer %.0f, RMW %.0f), mean wait %.0f us\n",
               s4k_op_names[i], o->modelled_requests,
               o->modelled_ns / n / 1e3, o->modelled_base_ns / n / 1e3,
               o->modelled_transfer_ns / n / 1e3, o->modelled_rmw_ns / n / 1e3,
               o->modelled_wait_ns / n / 1e3);
  }
}

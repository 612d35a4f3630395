/* The figures GET /metrics serves (api/metrics.c) and the OTLP metrics exporter sends
 * (metrics/otlp.c): one module both use, so neither depends on the other. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics/metrics.h"
#include "core/log.h"

struct cpu_sample {
	unsigned long long busy, total;
};

static int read_cpu(struct cpu_sample *s)
{
	FILE *f = fopen("/proc/stat", "re");
	if (!f)
		return -1;
	unsigned long long v[8] = {0};
	int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
		       &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	if (n < 4)
		return -1;
	s->total = 0;
	for (int i = 0; i < 8; i++)
		s->total += v[i];
	s->busy = s->total - v[3] - v[4]; /* minus idle and iowait */
	return 0;
}

static double mem_kib(const char *key)
{
	FILE *f = fopen("/proc/meminfo", "re");
	if (!f)
		return 0;
	char line[256];
	double val = 0;
	size_t kl = strlen(key);
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, key, kl) && line[kl] == ':') {
			val = strtod(line + kl + 1, NULL);
			break;
		}
	}
	fclose(f);
	return val;
}

/* CPU use since the previous call (or since boot on the first). */
json_t *metrics_now(void)
{
	static struct cpu_sample prev;
	struct cpu_sample cur = {0};
	double pct = 0;
	if (read_cpu(&cur) == 0) {
		unsigned long long dt = cur.total - prev.total, db = cur.busy - prev.busy;
		if (dt)
			pct = 100.0 * (double)db / (double)dt;
		prev = cur;
	}
	double total = mem_kib("MemTotal"), avail = mem_kib("MemAvailable");
	return json_pack("{s:f,s:f,s:f,s:f,s:I}", "cpu_count",
			 (double)sysconf(_SC_NPROCESSORS_ONLN), "cpu_used_pct", pct,
			 "mem_total_mib", total / 1024.0, "mem_used_mib", (total - avail) / 1024.0,
			 "timestamp", (json_int_t)now_ms());
}

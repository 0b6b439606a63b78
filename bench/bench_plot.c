/* The bench report as an SVG image: median time against M (log-log, with the byte floor) and
 * achieved bandwidth against M (with the measured copy bandwidth). */
#include <math.h>
#include <string.h>

#include "bench_report.h"

#define WIDTH 1000
#define HEIGHT 470
#define PANEL_WIDTH 400
#define PANEL_HEIGHT 300
#define PANEL_TOP 95
#define LEFT_PANEL_X 80
#define RIGHT_PANEL_X 570

typedef struct axis {
  double low, high; /* in plotted units (log10 for log axes) */
  int logarithmic;
} axis;

typedef struct panel {
  double x, y; /* top-left of the plotting area */
  axis horizontal, vertical;
} panel;

static const char *const SERIES_COLOURS[BENCH_METHOD_COUNT] = {"#c0392b", "#2471a3", "#229954", "#8e44ad"};
static const char *const FLOOR_COLOUR = "#7f8c8d";

static double to_axis(const axis *a, double value) { return a->logarithmic ? log10(value) : value; }

static double px(const panel *p, double m) {
  double t = (log2(m) - p->horizontal.low) / (p->horizontal.high - p->horizontal.low);
  return p->x + t * PANEL_WIDTH;
}

static double py(const panel *p, double value) {
  double t = (to_axis(&p->vertical, value) - p->vertical.low) / (p->vertical.high - p->vertical.low);
  return p->y + PANEL_HEIGHT - t * PANEL_HEIGHT;
}

static void append_escaped(volt8_text_buffer *out, const char *text) {
  for (const char *c = text; *c; c++) {
    if (*c == '&') volt8_text_printf(out, "&amp;");
    else if (*c == '<') volt8_text_printf(out, "&lt;");
    else if (*c == '>') volt8_text_printf(out, "&gt;");
    else volt8_text_printf(out, "%c", *c);
  }
}

static void draw_frame(volt8_text_buffer *out, const panel *p, const char *title, const char *y_label) {
  volt8_text_printf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n", p->x, p->y,
              PANEL_WIDTH, PANEL_HEIGHT);
  volt8_text_printf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"15\">%s</text>\n",
              p->x + PANEL_WIDTH / 2.0, p->y - 12, title);
  volt8_text_printf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\">tokens M</text>\n",
              p->x + PANEL_WIDTH / 2.0, p->y + PANEL_HEIGHT + 40);
  volt8_text_printf(out, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\" font-size=\"13\">%s</text>\n",
              p->x - 55, p->y + PANEL_HEIGHT / 2.0, y_label);
  for (int e = (int)ceil(p->horizontal.low); e <= (int)floor(p->horizontal.high); e++) {
    double x = px(p, exp2(e));
    volt8_text_printf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x, p->y, x,
                p->y + PANEL_HEIGHT);
    volt8_text_printf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\">%d</text>\n", x,
                p->y + PANEL_HEIGHT + 18, 1 << e);
  }
  /* log axis: 1, 2 and 5 times each power of ten; linear: five steps */
  static const double log_steps[3] = {1.0, 2.0, 5.0};
  int count = p->vertical.logarithmic ? (int)(p->vertical.high - p->vertical.low) * 3 + 1 : 6;
  for (int i = 0; i < count; i++) {
    double value = p->vertical.logarithmic
                       ? pow(10.0, p->vertical.low + i / 3) * log_steps[i % 3]
                       : p->vertical.low + (p->vertical.high - p->vertical.low) * i / (count - 1);
    if (to_axis(&p->vertical, value) > p->vertical.high + 1e-9) break;
    double y = py(p, value);
    volt8_text_printf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", p->x, y,
                p->x + PANEL_WIDTH, y);
    volt8_text_printf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"12\">%.*f</text>\n", p->x - 6, y + 4,
                value < 10 && value != floor(value) ? 1 : 0, value);
  }
}

/* A polyline through the points whose value is positive, with a marker at each. */
static void draw_series(volt8_text_buffer *out, const panel *p, const double *m, const double *values, int32_t count,
                        const char *colour, int dashed) {
  int32_t points = 0;
  for (int32_t i = 0; i < count; i++) points += values[i] > 0;
  if (points == 0) return;
  volt8_text_printf(out, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", colour,
              dashed ? " stroke-dasharray=\"6,4\"" : "");
  for (int32_t i = 0; i < count; i++)
    if (values[i] > 0) volt8_text_printf(out, "%.1f,%.1f ", px(p, m[i]), py(p, values[i]));
  volt8_text_printf(out, "\"/>\n");
  for (int32_t i = 0; i < count && !dashed; i++)
    if (values[i] > 0)
      volt8_text_printf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", px(p, m[i]), py(p, values[i]), colour);
}

static void value_range(const double *values, int32_t count, double *low, double *high) {
  for (int32_t i = 0; i < count; i++) {
    if (values[i] <= 0) continue;
    if (*low <= 0 || values[i] < *low) *low = values[i];
    if (values[i] > *high) *high = values[i];
  }
}

/* The methods on one row, the floors on the next. */
static void draw_legend(volt8_text_buffer *out) {
  const char *labels[BENCH_METHOD_COUNT + 2];
  for (int i = 0; i < BENCH_METHOD_COUNT; i++) labels[i] = bench_method_label((bench_method)i);
  labels[BENCH_METHOD_COUNT] = "FP8 byte floor";
  labels[BENCH_METHOD_COUNT + 1] = "copy bandwidth";
  for (int i = 0; i < BENCH_METHOD_COUNT + 2; i++) {
    int floor_row = i >= BENCH_METHOD_COUNT;
    double x = 80 + (floor_row ? i - BENCH_METHOD_COUNT : i) * 230, y = floor_row ? 68 : 46;
    const char *colour = floor_row ? FLOOR_COLOUR : SERIES_COLOURS[i];
    volt8_text_printf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n", x,
                      y, x + 26, y, colour, floor_row ? " stroke-dasharray=\"6,4\"" : "");
    volt8_text_printf(out, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">%s</text>\n", x + 32, y + 4, labels[i]);
  }
}

char *bench_report_svg(const bench_report *report) {
  int32_t count = report->count;
  double m[BENCH_MAX_M], floor_us[BENCH_MAX_M], times[BENCH_METHOD_COUNT][BENCH_MAX_M], rates[BENCH_METHOD_COUNT][BENCH_MAX_M];
  double time_low = 0, time_high = 0, rate_high = report->copy_gbps;
  for (int32_t i = 0; i < count; i++) {
    m[i] = report->results[i].m;
    floor_us[i] = report->results[i].floor_us;
    for (int method = 0; method < BENCH_METHOD_COUNT; method++) {
      const bench_method_result *result = &report->results[i].methods[method];
      times[method][i] = result->ran ? result->timing.median_us : 0.0;
      rates[method][i] = result->ran ? result->gbps : 0.0;
      if (rates[method][i] > rate_high) rate_high = rates[method][i];
    }
  }
  value_range(floor_us, count, &time_low, &time_high);
  for (int method = 0; method < BENCH_METHOD_COUNT; method++) value_range(times[method], count, &time_low, &time_high);
  if (time_low <= 0) time_low = 1, time_high = 10;
  double m_low = count ? m[0] : 1, m_high = count ? m[count - 1] : 2;
  panel left = {LEFT_PANEL_X, PANEL_TOP, {floor(log2(m_low)), ceil(log2(m_high)), 1},
                {floor(log10(time_low)), ceil(log10(time_high)), 1}};
  if (left.horizontal.high <= left.horizontal.low) left.horizontal.high = left.horizontal.low + 1;
  if (left.vertical.high <= left.vertical.low) left.vertical.high = left.vertical.low + 1;
  panel right = {RIGHT_PANEL_X, PANEL_TOP, left.horizontal, {0, rate_high > 0 ? rate_high * 1.1 : 1, 0}};

  volt8_text_buffer out = {0};
  volt8_text_printf(&out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                    "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
              WIDTH, HEIGHT, WIDTH, HEIGHT);
  volt8_text_printf(&out, "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">MoE forward, graph-replayed: ",
              WIDTH / 2);
  append_escaped(&out, report->device_name);
  volt8_text_printf(&out, ", H=%d I=%d (offset %d) E=%d top-%d</text>\n", report->shape.hidden, report->shape.intermediate,
              report->shape.intermediate_offset, report->shape.num_experts, report->top_k);
  draw_legend(&out);
  draw_frame(&out, &left, "median time per forward", "microseconds (log)");
  draw_frame(&out, &right, "achieved bandwidth (each method's own bytes)", "GB/s");
  draw_series(&out, &left, m, floor_us, count, FLOOR_COLOUR, 1);
  for (int method = 0; method < BENCH_METHOD_COUNT; method++) {
    draw_series(&out, &left, m, times[method], count, SERIES_COLOURS[method], 0);
    draw_series(&out, &right, m, rates[method], count, SERIES_COLOURS[method], 0);
  }
  if (report->copy_gbps > 0) {
    double y = py(&right, report->copy_gbps);
    volt8_text_printf(&out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\" "
                      "stroke-dasharray=\"6,4\"/>\n", right.x, y, right.x + PANEL_WIDTH, y, FLOOR_COLOUR);
    volt8_text_printf(&out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"12\">copy %.0f GB/s</text>\n",
                right.x + PANEL_WIDTH - 4, y - 6, report->copy_gbps);
  }
  volt8_text_printf(&out, "</svg>\n");
  return volt8_text_take(&out);
}

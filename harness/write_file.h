/* A text written to a file whole (the reports, the tuning tables); the text itself is built in the
 * runtime's growing text (core/text_buffer.h, through tools/tools.h). */
#ifndef VOLT8_BENCH_WRITE_FILE_H
#define VOLT8_BENCH_WRITE_FILE_H

/* Writes `text` to `path` (a new temporary file, then rename; a failure removes nothing else). 0 on
 * success, else errno. */
int bench_write_file(const char *path, const char *text);

#endif

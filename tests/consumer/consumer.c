/* A program outside the project that uses only the installed header and library. */
#include <stdio.h>
#include <string.h>
#include <volt8.h>

int main(void) {
  if (volt8_version_number() != VOLT8_VERSION_NUMBER) {
    fprintf(stderr, "header %d but library %d\n", VOLT8_VERSION_NUMBER, volt8_version_number());
    return 1;
  }
  volt8_ctx_options options = VOLT8_CTX_OPTIONS_INIT;
  options.device = -1;
  options.cache_disable = 1;
  volt8_ctx *ctx = NULL;
  volt8_status status = volt8_ctx_create(&options, &ctx);
  if (status != VOLT8_OK) {
    fprintf(stderr, "volt8_ctx_create: %s: %s\n", volt8_status_string(status), volt8_last_error(NULL));
    return 1;
  }
  status = volt8_ctx_require_device(ctx);
  int ok = status == VOLT8_ERR_NO_DEVICE && strlen(volt8_last_error(ctx)) > 0;
  volt8_ctx_destroy(ctx);
  volt8_ctx_destroy(NULL);
  printf("consumer: volt8 %s, no-device path %s\n", volt8_version_string(), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

/*
 * cflow.c — the `cflow` command: one binary, one subcommand per job.
 *
 *   cflow convert   GGUF / llama2.c / Hugging Face -> .cflow
 *   cflow run       generate text from a prompt
 *   cflow tokenize  print token ids
 *   cflow inspect   header, geometry and tiles of a .cflow file
 *   cflow runs      the run log: list, show, compare, export
 *   cflow bench     throughput (llama-bench's tests), membw, l1d, directio
 *   cflow models    the cache of models converted on the fly: list, rm, clear
 *   cflow serve     the model over HTTP (OpenAI's and ollama's APIs; src/serve)
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kern.h"
#include "ui/cli/cli.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} cmds[] = {
    { "convert", ui_cmd_convert, "convert a GGUF, llama2.c or Hugging Face model to .cflow" },
    { "run", ui_cmd_run, "generate text from a prompt" },
    { "tokenize", ui_cmd_tokenize, "print the token ids of a text" },
    { "inspect", ui_cmd_inspect, "show a .cflow file's header, geometry and tiles" },
    { "synth", ui_cmd_synth, "write a random-weight model for a preset" },
    { "ppl", ui_cmd_ppl, "perplexity and bits per byte over a text file" },
    { "runs", ui_cmd_runs, "list, show, compare and export logged runs" },
    { "bench", ui_cmd_bench, "throughput as llama-bench measures it; membw, l1d, directio" },
    { "models", ui_cmd_models, "list and free the cache of models converted on the fly" },
    { "serve", ui_cmd_serve, "serve a model over HTTP: OpenAI's and ollama's APIs" },
};

static void usage(FILE *f)
{
    fprintf(f, "usage: cflow [--version] [--help] COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        fprintf(f, "  %-10s %s\n", cmds[i].name, cmds[i].help);
    fprintf(f, "\n'cflow COMMAND --help' describes each command; see cflow(1).\n");
}

static void version(void)
{
    const kern_ops *ops = kern_init();
    printf("cflow %s\n", PACKAGE_VERSION);
    printf("kernels: %s (cpu: %s)\n", ops->name, kern_cpu_features());
}

int main(int argc, char **argv)
{
    ui_std_fds();
    if (argc < 2) {
        usage(stderr);
        return UI_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        int rc = ui_env_check("cflow");   /* it names the tier $CFLOW_ISA picks */
        if (rc >= 0)
            return rc;
        version();
        return UI_EXIT_OK;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(stdout);
        return UI_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        if (!strcmp(argv[1], cmds[i].name)) {
            int rc = ui_env_check("cflow");
            if (rc < 0)
                rc = cmds[i].fn(argc - 1, argv + 1);
            /* what the command printed must have reached stdout: a
             * closed or full one is an error, never a silent success */
            if (rc == UI_EXIT_OK && (fflush(stdout) || ferror(stdout)))
                rc = ui_error("standard output: %s", strerror(errno));
            return rc;
        }
    ui_eprintf("cflow: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return UI_EXIT_USAGE;
}

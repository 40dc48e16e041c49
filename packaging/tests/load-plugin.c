/*
 * Loads the plugin the way NCCL does, for the package checks in an old distribution's root:
 *
 *   load-plugin PATH
 *
 * dlopen(PATH, RTLD_NOW | RTLD_LOCAL) (every symbol and symbol version resolved at once), then
 * dlsym("ncclNetPlugin_v8"): the table must be named "Ferro" with init .. closeListen set. Then
 * init with a logger that prints each line, and devices: without libibverbs in the root, init
 * must fail cleanly (a return code, no crash), and devices must answer 0 devices or an error.
 * Exit status 0 when all of that holds, 1 otherwise. Plain C with no dependency beyond libc and
 * libdl, so it builds for any glibc.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ncclNet_v8_t as NCCL lays it out: the name, then 18 function pointers (init .. closeListen are
 * the 16 NCCL requires; getDeviceMr and irecvConsumed may be NULL). */
struct net_v8 {
    const char *name;
    int (*init)(void (*logger)(int, unsigned long, const char *, int, const char *, ...));
    int (*devices)(int *ndev);
    void *rest[16];
};

static void logger(int level, unsigned long flags, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    (void)flags;
    fprintf(stderr, "  plugin log (level %d, %s:%d): ", level, file ? file : "?", line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int main(int argc, char **argv)
{
    void *lib;
    const struct net_v8 *net;
    int i, rc, ndev = -1;

    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH-TO-PLUGIN\n", argv[0]);
        return 2;
    }
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "load-plugin: dlopen failed: %s\n", dlerror());
        return 1;
    }
    net = (const struct net_v8 *)dlsym(lib, "ncclNetPlugin_v8");
    if (!net) {
        fprintf(stderr, "load-plugin: no ncclNetPlugin_v8: %s\n", dlerror());
        return 1;
    }
    if (!net->name || strcmp(net->name, "Ferro") != 0) {
        fprintf(stderr, "load-plugin: ncclNetPlugin_v8 is named %s, not Ferro\n",
                net->name ? net->name : "(null)");
        return 1;
    }
    if (!net->init || !net->devices) {
        fprintf(stderr, "load-plugin: init or devices is NULL\n");
        return 1;
    }
    for (i = 0; i < 14; i++) {
        if (!net->rest[i]) {
            fprintf(stderr, "load-plugin: ncclNetPlugin_v8 entry %d is NULL\n", i + 3);
            return 1;
        }
    }
    rc = net->init(logger);
    fprintf(stderr, "load-plugin: init returned %d\n", rc);
    i = net->devices(&ndev);
    fprintf(stderr, "load-plugin: devices returned %d (%d devices)\n", i, ndev);
    if (rc == 0 && i != 0) {
        fprintf(stderr, "load-plugin: devices failed after a successful init\n");
        return 1;
    }
    if (rc != 0 && i == 0 && ndev != 0) {
        fprintf(stderr, "load-plugin: devices reported %d devices after a failed init\n", ndev);
        return 1;
    }
    printf("load-plugin: %s loaded, table %s, init %d, devices %d\n", argv[1], net->name, rc, i);
    return 0;
}

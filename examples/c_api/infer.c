/* examples/c_api/infer.c — the C API example of README.md: load the MLP
 * inference program and its startup program, initialize the parameters, and
 * classify four random images with the single-place executor.
 *
 *     ./infer [DIR]        DIR holds mlp_infer.pe and mlp_infer_startup.pe (default: examples)
 *
 * Built against an installed PE by examples/c_api/CMakeLists.txt
 * (find_package(PE)) or with `cc infer.c $(pkg-config --cflags --libs pe)`;
 * tests/install/check_install.sh does both. Prints one line per image and
 * "ok" when every row of `prob` sums to 1.
 */
#include <pe/pe.h>
#include <math.h>
#include <stdio.h>

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "examples";
    char path[4096];
    int rc = 1;
    pe_program *startup = NULL, *prog = NULL;
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_tensor *x = pe_tensor_new(), *prob = pe_tensor_new();
    if (!scope || !ex || !x || !prob) goto done;

    snprintf(path, sizeof path, "%s/mlp_infer_startup.pe", dir);
    if (pe_program_load_file(path, &startup) != PE_OK) goto done;
    snprintf(path, sizeof path, "%s/mlp_infer.pe", dir);
    if (pe_program_load_file(path, &prog) != PE_OK) goto done;
    if (pe_executor_run(ex, startup, 0, scope, NULL, 0, NULL, 0, NULL) != PE_OK) goto done; /* init params */

    int64_t dims[2] = {4, 784};                                  /* x: [N, 784] */
    if (pe_tensor_resize(x, PE_DTYPE_FP32, 2, dims, pe_place_cpu(0)) != PE_OK) goto done;
    float *xp = pe_tensor_data(x);
    for (int i = 0; i < 4 * 784; i++) xp[i] = (float)((i * 7919) % 1000) / 1000.0f;

    pe_feed feed = {"x", x};
    const char *fetch[] = {"prob"};
    if (pe_executor_run(ex, prog, 0, scope, &feed, 1, fetch, 1, &prob) != PE_OK) goto done;

    const float *p = pe_tensor_data(prob);                       /* prob: [N, 10] */
    int ok = prob->ndim == 2 && prob->dims[0] == 4;
    for (int64_t i = 0; ok && i < prob->dims[0]; i++) {
        int best = 0;
        double sum = 0;
        for (int64_t j = 0; j < prob->dims[1]; j++) {
            sum += p[i * prob->dims[1] + j];
            if (p[i * prob->dims[1] + j] > p[i * prob->dims[1] + best]) best = (int)j;
        }
        printf("image %lld: class %d (p=%.3f), sum of probabilities %.4f\n", (long long)i, best,
               p[i * prob->dims[1] + best], sum);
        ok = fabs(sum - 1.0) < 1e-4;
    }
    printf("%s\n", ok ? "ok" : "wrong probabilities");
    rc = ok ? 0 : 1;

done:
    if (rc != 0 && pe_last_error()[0]) fprintf(stderr, "pe: error: %s\n", pe_last_error());
    pe_tensor_free(x);
    pe_tensor_free(prob);
    pe_executor_free(ex);
    pe_scope_free(scope);
    pe_program_free(prog);
    pe_program_free(startup);
    return rc;
}

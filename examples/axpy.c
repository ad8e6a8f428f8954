/* The smallest Ember program: y = 2x + y on every device this machine has,
 * each checked against the CPU. Build against an installed Ember with
 *   cc axpy.c $(pkg-config --cflags --libs ember) -o axpy */
#include <ember.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One device: fill x with 1, y with 3, y = 2x + y, read back, expect 5. */
static int run_on(em_device dev, size_t n) {
  float *x = NULL, *y = NULL, *host = malloc(n * sizeof *host);
  int bad = host == NULL;
  if (!bad && (em_malloc(dev, n * sizeof(float), (void **)&x) || em_malloc(dev, n * sizeof(float), (void **)&y) ||
               em_fill_f32(dev, x, 1.0f, n, NULL) || em_fill_f32(dev, y, 3.0f, n, NULL) ||
               em_axpy_f32(dev, 2.0f, x, y, n, NULL) || em_memcpy_d2h(dev, host, y, n * sizeof(float), NULL))) {
    fprintf(stderr, "axpy: %s\n", em_last_error());
    bad = 1;
  }
  for (size_t i = 0; !bad && i < n; i++)
    if (host[i] != 5.0f) {
      fprintf(stderr, "axpy: y[%zu] = %g, expected 5\n", i, host[i]);
      bad = 1;
    }
  em_free(dev, x);
  em_free(dev, y);
  free(host);
  return bad;
}

int main(void) {
  int gpus = 0, bad = run_on(em_cpu(), 1 << 20);
  printf("cpu: %s\n", bad ? "FAILED" : "ok");
  em_cuda_device_count(&gpus);
  for (int d = 0; d < gpus; d++) {
    em_device_info info;
    em_plan plan;
    em_device_get_info(em_cuda(d), &info);
    em_dispatch_plan(em_cuda(d), "elementwise", &plan);
    int b = run_on(em_cuda(d), 1 << 20);
    printf("cuda:%d %s via %s: %s\n", d, info.name, em_path_name(plan.path), b ? "FAILED" : "ok");
    bad |= b;
  }
  em_shutdown();
  return bad;
}

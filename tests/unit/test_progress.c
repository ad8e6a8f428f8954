/* The progress output of training (trainer.h, training/progress.c): the JSON
 * lines a script reads (one every `every` minibatches and one per epoch,
 * absent values as null, each line a whole object), the bar on a terminal
 * (drawn in place with a carriage return, the epoch's summary below it),
 * AUTO choosing JSON on a stream that is not a terminal, and the refusals.
 * Expected values are the reports the test hands in. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "ember.h"

/* The text written to a memory stream by fn(p). */
typedef struct capture {
  char *buf;
  size_t len;
  FILE *f;
} capture;

static void cap_open(capture *c) {
  c->buf = NULL;
  c->len = 0;
  c->f = open_memstream(&c->buf, &c->len);
  assert_non_null(c->f);
}

static void cap_close(capture *c) {
  fclose(c->f);
  c->f = NULL;
}

static em_train_report report(int64_t epoch, uint64_t minibatch, uint64_t batch) {
  return (em_train_report){.epoch = epoch,
                           .epochs = 2,
                           .minibatch = minibatch,
                           .samples = minibatch * batch,
                           .epoch_size = 10 * batch,
                           .loss = 1.0 / (double)minibatch,
                           .metric = 0.25,
                           .mb_loss = 0.5,
                           .mb_metric = 0.125,
                           .seconds = 0.5 * (double)minibatch,
                           .val_loss = NAN,
                           .val_metric = NAN,
                           .has_metric = 1};
}

static json_t *line_json(const char *line) {
  json_error_t e;
  json_t *j = json_loads(line, 0, &e);
  if (!j) fail_msg("not a JSON line (%s): %s", e.text, line);
  return j;
}

static double num(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_number(v)) fail_msg("\"%s\" is not a number", key);
  return json_number_value(v);
}

static void test_json_lines(void **state) {
  (void)state;
  capture c;
  cap_open(&c);
  em_progress *p;
  assert_int_equal(em_progress_create(c.f, EM_PROGRESS_JSON, 4, "error", &p), EM_OK);
  assert_int_equal(em_progress_get_style(p), EM_PROGRESS_JSON);
  for (uint64_t m = 1; m <= 10; m++) {
    em_train_report r = report(1, m, 8);
    assert_int_equal(em_progress_minibatch(&r, p), 0);
  }
  em_train_report end = report(1, 10, 8);
  end.val_metric = 0.125;
  assert_int_equal(em_progress_epoch(&end, p), 0);
  em_progress_free(p);
  cap_close(&c);

  /* Minibatches 4 and 8, then the epoch: three whole lines. */
  char *save = NULL, *line = strtok_r(c.buf, "\n", &save);
  int n = 0;
  for (; line; line = strtok_r(NULL, "\n", &save), n++) {
    json_t *o = line_json(line);
    const char *ev = json_string_value(json_object_get(o, "event"));
    assert_non_null(ev);
    if (n < 2) {
      uint64_t m = 4 * (uint64_t)(n + 1);
      assert_string_equal(ev, "progress");
      assert_int_equal((int)num(o, "minibatch"), (int)m);
      assert_int_equal((int)num(o, "samples"), (int)(8 * m));
      assert_true(fabs(num(o, "loss") - 1.0 / (double)m) < 1e-7);
      assert_true(fabs(num(o, "metric") - 0.25) < 1e-12);
      /* samples / seconds = 8 m / (0.5 m) */
      assert_true(fabs(num(o, "samples_per_s") - 16.0) < 1e-9);
    } else {
      assert_string_equal(ev, "epoch");
      assert_int_equal((int)num(o, "epoch"), 1);
      assert_int_equal((int)num(o, "samples"), 80);
      assert_true(fabs(num(o, "seconds") - 5.0) < 1e-12);
      assert_true(json_is_null(json_object_get(o, "val_loss")));
      assert_true(fabs(num(o, "val_metric") - 0.125) < 1e-12);
    }
    json_decref(o);
  }
  assert_int_equal(n, 3);
  free(c.buf);
}

static void test_json_without_metric_writes_null(void **state) {
  (void)state;
  capture c;
  cap_open(&c);
  em_progress *p;
  assert_int_equal(em_progress_create(c.f, EM_PROGRESS_JSON, 1, NULL, &p), EM_OK);
  em_train_report r = report(3, 1, 5);
  r.has_metric = 0;
  em_progress_minibatch(&r, p);
  em_progress_free(p);
  cap_close(&c);
  json_t *o = line_json(c.buf);
  assert_true(json_is_null(json_object_get(o, "metric")));
  assert_int_equal((int)num(o, "epoch"), 3);
  json_decref(o);
  free(c.buf);
}

/* With dynamic loss scaling the epoch line carries the scale and the skipped steps, in
 * both styles; without it (NaN, or a report that never set them) neither appears. */
static void test_loss_scale_fields(void **state) {
  (void)state;
  for (int style = 0; style < 2; style++) {
    for (int scaled = 0; scaled < 2; scaled++) {
      capture c;
      cap_open(&c);
      em_progress *p;
      assert_int_equal(em_progress_create(c.f, style ? EM_PROGRESS_BAR : EM_PROGRESS_JSON, 0, "error", &p), EM_OK);
      em_train_report r = report(1, 10, 8);
      r.loss_scale = scaled ? 16384 : NAN;
      r.skipped_steps = scaled ? 2 : 0;
      em_progress_epoch(&r, p);
      em_progress_free(p);
      cap_close(&c);
      if (style == 0) {
        json_t *o = line_json(c.buf);
        if (scaled) {
          assert_true(num(o, "loss_scale") == 16384);
          assert_int_equal((int)num(o, "skipped_steps"), 2);
        } else {
          assert_null(json_object_get(o, "loss_scale"));
          assert_null(json_object_get(o, "skipped_steps"));
        }
        json_decref(o);
      } else if (scaled != (strstr(c.buf, "loss scale 16384 (2 steps skipped)") != NULL)) {
        fail_msg("bar (scaled %d): %s", scaled, c.buf);
      }
      free(c.buf);
    }
  }
}

static void test_bar(void **state) {
  (void)state;
  capture c;
  cap_open(&c);
  em_progress *p;
  assert_int_equal(em_progress_create(c.f, EM_PROGRESS_BAR, 0, "error", &p), EM_OK);
  em_progress_minibatch((em_train_report[]){report(1, 1, 8)}, p); /* the first always draws */
  em_train_report end = report(1, 10, 8);
  end.val_metric = 0.0625;
  em_progress_minibatch(&end, p); /* the epoch's last minibatch always draws */
  em_progress_epoch(&end, p);
  em_progress_free(p);
  cap_close(&c);
  /* Drawn in place: each bar starts with a carriage return and no newline
   * comes before the epoch's summary. */
  assert_int_equal(c.buf[0], '\r');
  assert_non_null(strstr(c.buf, "epoch 1/2 ["));
  assert_non_null(strstr(c.buf, "8/80"));
  assert_non_null(strstr(c.buf, "80/80"));
  assert_non_null(strstr(c.buf, "error 0.2500"));
  char *nl = strchr(c.buf, '\n');
  assert_non_null(nl);
  assert_null(memchr(c.buf, '\n', (size_t)(strstr(c.buf, "80/80") - c.buf)));
  assert_non_null(strstr(nl, "epoch 1: loss 0.1000"));
  assert_non_null(strstr(nl, "80 samples"));
  assert_non_null(strstr(nl, "validation error 0.0625"));
  assert_int_equal(c.buf[c.len - 1], '\n');
  free(c.buf);
}

static void test_auto_on_a_file_is_json(void **state) {
  (void)state;
  FILE *f = tmpfile();
  assert_non_null(f);
  em_progress *p;
  assert_int_equal(em_progress_create(f, EM_PROGRESS_AUTO, 0, NULL, &p), EM_OK);
  assert_int_equal(em_progress_get_style(p), EM_PROGRESS_JSON);
  em_progress_free(p);
  fclose(f);
}

static void test_refusals(void **state) {
  (void)state;
  em_progress *p = (em_progress *)1;
  assert_int_equal(em_progress_create(NULL, EM_PROGRESS_JSON, 0, NULL, &p), EM_ERR_INVALID_ARGUMENT);
  assert_null(p);
  assert_int_equal(em_progress_create(stdout, (em_progress_style)9, 0, NULL, &p), EM_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(em_last_error(), "style"));
  assert_int_equal(em_progress_create(stdout, EM_PROGRESS_JSON, 0, NULL, NULL), EM_ERR_INVALID_ARGUMENT);
  /* NONE writes nothing and needs no stream. */
  assert_int_equal(em_progress_create(NULL, EM_PROGRESS_NONE, 0, NULL, &p), EM_OK);
  em_progress_minibatch((em_train_report[]){report(1, 1, 1)}, p);
  em_progress_epoch((em_train_report[]){report(1, 1, 1)}, p);
  em_progress_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_json_lines),
      cmocka_unit_test(test_json_without_metric_writes_null),
      cmocka_unit_test(test_bar),
      cmocka_unit_test(test_loss_scale_fields),
      cmocka_unit_test(test_auto_on_a_file_is_json),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#include "run_self.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int ts_run_self(const char *arg, const char *var, const char *value) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return -1;
  self[n] = 0;
  fflush(NULL); /* nothing buffered is written twice */
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    setenv(var, value, 1);
    execl(self, self, arg, (char *)NULL);
    _exit(127);
  }
  int ws;
  if (waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws)) return -1;
  return WEXITSTATUS(ws);
}

/* Experiment only, not shipped (docs/benchmarks.md, "helper, busy machine"): an action's view
 * built in the action's own process after the fork, then the command executed.
 * Build: gcc -O2 -o viewinit viewinit.c. argv: root upper work tmp nhidden hidden... -- cmd...
 * hidden[0] is the mask that holds root and tmp (made read-only after they are attached). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/mount.h>
#include <errno.h>
#include <sys/stat.h>
static void die(const char *what, const char *path) { fprintf(stderr, "viewinit: %s %s: %s\n", what, path, strerror(errno)); _exit(125); }
static int sc_fsopen(const char *n) { return syscall(SYS_fsopen, n, FSOPEN_CLOEXEC); }
static int sc_fsconfig(int fd, unsigned cmd, const char *k, const void *v) { return syscall(SYS_fsconfig, fd, cmd, k, v, 0); }
static int sc_fsmount(int fd, unsigned a) { return syscall(SYS_fsmount, fd, FSMOUNT_CLOEXEC, a); }
static int sc_move(int fd, const char *to) { return syscall(SYS_move_mount, fd, "", AT_FDCWD, to, MOVE_MOUNT_F_EMPTY_PATH); }
static int sc_clone_tree(const char *p) { return syscall(SYS_open_tree, AT_FDCWD, p, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE); }
static int sc_setattr(const char *p, unsigned long long set, unsigned long long prop, int rec) {
  struct mount_attr a = {.attr_set = set, .propagation = prop};
  return syscall(SYS_mount_setattr, AT_FDCWD, p, rec ? AT_RECURSIVE : 0, &a, sizeof a);
}
int main(int argc, char **argv) {
  if (argc < 7) return 125;
  const char *root = argv[1], *upper = argv[2], *work = argv[3], *tmp = argv[4];
  int nh = atoi(argv[5]); char **hidden = argv + 6; char **cmd = argv + 6 + nh + 1;
  if (unshare(CLONE_NEWNS)) die("unshare", "");
  int fs = sc_fsopen("overlay"); if (fs < 0) die("fsopen", root);
  if (sc_fsconfig(fs, FSCONFIG_SET_STRING, "lowerdir", root) || sc_fsconfig(fs, FSCONFIG_SET_STRING, "upperdir", upper) ||
      sc_fsconfig(fs, FSCONFIG_SET_STRING, "workdir", work) || sc_fsconfig(fs, FSCONFIG_SET_STRING, "redirect_dir", "nofollow") ||
      sc_fsconfig(fs, FSCONFIG_SET_STRING, "metacopy", "off") || sc_fsconfig(fs, FSCONFIG_SET_STRING, "index", "off") ||
      sc_fsconfig(fs, FSCONFIG_SET_FLAG, "volatile", NULL) || sc_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL)) die("fsconfig", root);
  int ovl = sc_fsmount(fs, 0); if (ovl < 0) die("fsmount", root);
  int tmpfd = sc_clone_tree(tmp); if (tmpfd < 0) die("open_tree", tmp);
  if (sc_setattr("/", MOUNT_ATTR_RDONLY, MS_SLAVE, 1)) die("mount_setattr", "/");
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=50%")) die("mount", "/tmp");
  if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=50%")) die("mount", "/dev/shm");
  /* hidden[0] holds root and tmp: writable until they are attached */
  for (int i = 0; i < nh; i++)
    if (mount("tmpfs", hidden[i], "tmpfs", MS_NOSUID | MS_NODEV | (i ? MS_RDONLY : 0), "mode=0755,size=64k,nr_inodes=4096")) die("mount", hidden[i]);
  /* mount points inside the first mask */
  char path[4096]; for (const char *p = root; ; ) { const char *s = strchr(p + 1, '/'); size_t n = s ? (size_t)(s - root) : strlen(root); memcpy(path, root, n); path[n] = 0; mkdir(path, 0755); if (!s) break; p = s; }
  for (const char *p = tmp; ; ) { const char *s = strchr(p + 1, '/'); size_t n = s ? (size_t)(s - tmp) : strlen(tmp); memcpy(path, tmp, n); path[n] = 0; mkdir(path, 0755); if (!s) break; p = s; }
  if (sc_move(ovl, root)) die("move_mount", root);
  if (sc_move(tmpfd, tmp)) die("move_mount", tmp);
  if (nh && sc_setattr(hidden[0], MOUNT_ATTR_RDONLY, 0, 0)) die("mount_setattr", hidden[0]);
  if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)) die("mount", "/proc");
  close(ovl); close(tmpfd); close(fs);
  if (chdir(root)) die("chdir", root);
  execv(cmd[0], cmd); die("exec", cmd[0]);
}

/* A STAND-IN for libamdhip64.so, for plumbing tests only: it runs nothing on any GPU. It records
 * what the native launcher asks of the HIP module API (module loads, function lookups, launches
 * with grid, block, shared bytes, stream and the kernarg buffer passed through
 * HIP_LAUNCH_PARAM_BUFFER_POINTER) so a test can read them back through ctypes. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MAX_RECORDS 256
#define MAX_KERNARG 512
#define MAX_NAME 256

typedef struct {
  char name[MAX_NAME];
  unsigned dims[6];
  unsigned shared;
  uint64_t stream;
  size_t size;
  unsigned char kernarg[MAX_KERNARG];
  int params_given; /* kernelParams non-null: the launcher should use extra only */
} launch_record;

static int module_loads;
static char functions[MAX_RECORDS][MAX_NAME];
static int function_count;
static launch_record launches[MAX_RECORDS];
static int launch_count;

int hipModuleLoadData(void** module, const void* image) {
  const unsigned char* p = (const unsigned char*)image;
  if (!p || p[0] != 0x7f || p[1] != 'E' || p[2] != 'L' || p[3] != 'F') return 200; /* hipErrorInvalidImage */
  *module = (void*)(intptr_t)(++module_loads);
  return 0;
}

int hipModuleGetFunction(void** function, void* module, const char* name) {
  if (!module || function_count >= MAX_RECORDS) return 1;
  strncpy(functions[function_count], name, MAX_NAME - 1);
  *function = (void*)(intptr_t)(++function_count);
  return 0;
}

int hipModuleLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned shared, void* stream, void** params, void** extra) {
  intptr_t id = (intptr_t)f;
  if (id < 1 || id > function_count || !extra) return 1;
  launch_record* r = &launches[launch_count % MAX_RECORDS]; /* the last MAX_RECORDS are kept */
  memset(r, 0, sizeof *r);
  strncpy(r->name, functions[id - 1], MAX_NAME - 1);
  unsigned dims[6] = {gx, gy, gz, bx, by, bz};
  memcpy(r->dims, dims, sizeof dims);
  r->shared = shared;
  r->stream = (uint64_t)(uintptr_t)stream;
  r->params_given = params != NULL;
  const unsigned char* buffer = NULL;
  for (int i = 0; extra[i] != (void*)0x03; i += 2) {
    if (extra[i] == (void*)0x01) buffer = (const unsigned char*)extra[i + 1];
    else if (extra[i] == (void*)0x02) r->size = *(const size_t*)extra[i + 1];
    else return 1;
  }
  if (!buffer || r->size > MAX_KERNARG) return 1;
  memcpy(r->kernarg, buffer, r->size);
  ++launch_count;
  return 0;
}

static int capturing; /* what hipStreamIsCapturing answers for every stream (the test sets it) */

int hipStreamIsCapturing(void* stream, int* status) {
  (void)stream;
  *status = capturing; /* hipStreamCaptureStatusNone = 0, Active = 1 */
  return 0;
}

const char* hipGetErrorString(int e) { return e ? "stand-in HIP error" : "hipSuccess"; }

/* -- read back by the tests ----------------------------------------------------------------- */
int standin_module_loads(void) { return module_loads; }
int standin_launch_count(void) { return launch_count; }
const launch_record* standin_launch(int i) {
  return i >= 0 && i < launch_count && i >= launch_count - MAX_RECORDS ? &launches[i % MAX_RECORDS] : NULL;
}
void standin_reset(void) { launch_count = 0; }
void standin_set_capturing(int on) { capturing = on; }

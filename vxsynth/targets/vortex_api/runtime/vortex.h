/* vxsynth's own declarations of the Vortex v2.2 host runtime API (vortex.md 3.1), to compile the SimX host
 * driver offline. With a real installation the driver is built against its runtime/include/vortex.h. */
#ifndef VORTEX_H
#define VORTEX_H
#include <stdint.h>
#include <stdio.h>
#ifdef __cplusplus
extern "C" {
#endif
typedef void *vx_device_h;
typedef void *vx_buffer_h;
#define VX_CAPS_NUM_THREADS 0x1
#define VX_CAPS_NUM_WARPS 0x2
#define VX_CAPS_NUM_CORES 0x3
#define VX_CAPS_LOCAL_MEM_SIZE 0x6
#define VX_MEM_READ 0x1
#define VX_MEM_WRITE 0x2
#define VX_MEM_READ_WRITE 0x3
#define VX_MAX_TIMEOUT (24 * 60 * 60 * 1000)
int vx_dev_open(vx_device_h *hdevice);
int vx_dev_close(vx_device_h hdevice);
int vx_dev_caps(vx_device_h hdevice, uint32_t caps_id, uint64_t *value);
int vx_mem_alloc(vx_device_h hdevice, uint64_t size, int flags, vx_buffer_h *hbuffer);
int vx_mem_free(vx_buffer_h hbuffer);
int vx_mem_address(vx_buffer_h hbuffer, uint64_t *address);
int vx_copy_to_dev(vx_buffer_h hbuffer, const void *host_ptr, uint64_t dst_offset, uint64_t size);
int vx_copy_from_dev(void *host_ptr, vx_buffer_h hbuffer, uint64_t src_offset, uint64_t size);
int vx_start(vx_device_h hdevice, vx_buffer_h hkernel, vx_buffer_h harguments);
int vx_ready_wait(vx_device_h hdevice, uint64_t timeout);
int vx_upload_kernel_file(vx_device_h hdevice, const char *filename, vx_buffer_h *hbuffer);
int vx_upload_bytes(vx_device_h hdevice, const void *content, uint64_t size, vx_buffer_h *hbuffer);
int vx_check_occupancy(vx_device_h hdevice, uint32_t group_size, uint32_t *max_localmem);
int vx_dump_perf(vx_device_h hdevice, FILE *stream);
#ifdef __cplusplus
}
#endif
#endif

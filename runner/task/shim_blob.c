/* The shim binary (runner/shim/main.c, built apart as a small static
 * program) embedded in the runner: spawn_shim_init writes it to a sealed
 * memfd at start. SHIM_BIN is its path from the repository root. */
#ifndef SHIM_BIN
#define SHIM_BIN "build/shim/forceai-shim"
#endif

__asm__(".section .rodata.forceai_shim,\"a\"\n"
	".balign 16\n"
	".globl spawn_shim_elf\n"
	"spawn_shim_elf:\n"
	".incbin \"" SHIM_BIN "\"\n"
	".globl spawn_shim_elf_end\n"
	"spawn_shim_elf_end:\n"
	".byte 0\n"
	".previous\n");

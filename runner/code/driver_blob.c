/* The drivers of code contexts (runner/code/driver.py, driver.js, driver.sh) embedded in the
 * runner, as the task shim is (task/shim_blob.c): code.c hands it to each
 * interpreter it starts. CODE_DRIVER_PY is its path from the repository
 * root. */
#ifndef CODE_DRIVER_JS
#define CODE_DRIVER_JS "runner/code/driver.js"
#endif
#ifndef CODE_DRIVER_SH
#define CODE_DRIVER_SH "runner/code/driver.sh"
#endif
#ifndef CODE_DRIVER_PY
#define CODE_DRIVER_PY "runner/code/driver.py"
#endif

__asm__(".section .rodata.forceai_code_driver,\"a\"\n"
	".globl code_driver_py\n"
	"code_driver_py:\n"
	".incbin \"" CODE_DRIVER_PY "\"\n"
	".globl code_driver_py_end\n"
	"code_driver_py_end:\n"
	".byte 0\n"
	".globl code_driver_js\n"
	"code_driver_js:\n"
	".incbin \"" CODE_DRIVER_JS "\"\n"
	".globl code_driver_js_end\n"
	"code_driver_js_end:\n"
	".byte 0\n"
	".globl code_driver_sh\n"
	"code_driver_sh:\n"
	".incbin \"" CODE_DRIVER_SH "\"\n"
	".globl code_driver_sh_end\n"
	"code_driver_sh_end:\n"
	".byte 0\n"
	".previous\n");

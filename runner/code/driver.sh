# forceai-runner: the driver of a bash code context (docs/design/code.md#how-the-interpreter-is-driven). Embedded in
# the runner (runner/code/driver_blob.c) and run as `bash -c SOURCE` in a confined task.
# Requests, one per line on stdin: the code in base64, then NAME=value pairs in base64,
# space-separated. A cell runs in this shell (variables, functions and cd persist); its
# stdout and stderr are the task's own. The driver's messages are JSON lines on stdout,
# each after the marker (RS and the runner's per-context nonce), which the runner finds
# wherever it starts: everything else on stdout is the cell's output.
__fr_m=$'\x1e'"$FORCEAI_CODE_MARK"
unset FORCEAI_CODE_DRIVER FORCEAI_CODE_MARK
exec 4<&0 0</dev/null
__fr_n=0
trap ':' INT
__fr_run() {
	trap 'return 130' INT
	eval "$__fr_code"
}
printf '%s{"t":"ready"}\n' "$__fr_m"
while IFS= read -r __fr_line <&4; do
	read -r -a __fr_f <<<"$__fr_line"
	__fr_code=$(printf '%s' "${__fr_f[0]}" | base64 -d)
	__fr_saved=()
	for __fr_kv in "${__fr_f[@]:1}"; do
		__fr_kv=$(printf '%s' "$__fr_kv" | base64 -d)
		__fr_name=${__fr_kv%%=*}
		if [ -n "${!__fr_name+x}" ]; then
			__fr_saved+=("$__fr_name=${!__fr_name}")
		else
			__fr_saved+=("$__fr_name")
		fi
		export "$__fr_kv"
	done
	__fr_run
	__fr_st=$?
	trap ':' INT
	for __fr_kv in "${__fr_saved[@]}"; do
		case $__fr_kv in
		*=*) export "$__fr_kv" ;;
		*) unset "$__fr_kv" ;;
		esac
	done
	__fr_n=$((__fr_n + 1))
	if [ "$__fr_st" = 130 ]; then
		printf '%s{"t":"error","ename":"KeyboardInterrupt","evalue":"interrupted","traceback":[]}\n' "$__fr_m"
	elif [ "$__fr_st" != 0 ]; then
		printf '%s{"t":"error","ename":"ExitStatus","evalue":"%d","traceback":[]}\n' "$__fr_m" "$__fr_st"
	fi
	printf '%s{"t":"count","n":%d}\n%s{"t":"done"}\n' "$__fr_m" "$__fr_n" "$__fr_m"
done

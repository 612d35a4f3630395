/* filesystem.Filesystem's watchers (placeholder until the watch engine is wired). */
#include "envd/internal.h"

enum MHD_Result envd_fs_watch_dir(struct http_req *req)
{
	return envd_rpc_fail(req, true, CC_UNIMPLEMENTED, "WatchDir is not served yet");
}
enum MHD_Result envd_fs_create_watcher(struct http_req *req)
{
	return envd_rpc_fail(req, false, CC_UNIMPLEMENTED, "CreateWatcher is not served yet");
}
enum MHD_Result envd_fs_get_watcher_events(struct http_req *req)
{
	return envd_rpc_fail(req, false, CC_UNIMPLEMENTED, "GetWatcherEvents is not served yet");
}
enum MHD_Result envd_fs_remove_watcher(struct http_req *req)
{
	return envd_rpc_fail(req, false, CC_UNIMPLEMENTED, "RemoveWatcher is not served yet");
}
void envd_watchers_free(struct runner *r)
{
	(void)r;
}

/* The chat capability (docs/design/model.md#wire-formats-one-module-per-format): a command run with
 * a per-task model token and the loopback model proxy's address in its environment
 * (model/modelproxy.h). */
#pragma once
#include "task/task.h"

/* chat: modelproxy_start_task; it needs the gateway and the network (the proxy is on
 * 127.0.0.1), and keeps no changes. */
extern const struct task_capability model_cap_chat;

#pragma once
#ifndef FORCEAI_RUNNER_VERSION
#define FORCEAI_RUNNER_VERSION "0.1.0"
#endif

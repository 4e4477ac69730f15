// One place that turns a vendor runtime's error codes into c10::Error.
#pragma once

#include <c10/util/Exception.h>

// FLAGOS_RUNTIME_CHECK(call, error_string_fn, success_value): evaluates `call`
// once; on failure raises c10::Error naming the call and the runtime's message.
#define FLAGOS_RUNTIME_CHECK(call, error_string, success)                     \
  do {                                                                         \
    const auto flagos_status_ = (call);                                        \
    TORCH_CHECK(flagos_status_ == (success), "flagos runtime error in ", #call, \
                ": ", error_string(flagos_status_));                           \
  } while (0)

// The extension's error convention, shared by its files: a function returns nullptr on
// success, else a malloc'd message the Rust side frees with gl_free_error; no C++
// exception ever crosses into Rust (it would abort the process).
#pragma once

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <exception>

namespace gradless {

inline char* dup_message(const char* text) {
  size_t n = std::strlen(text);
  char* out = static_cast<char*>(std::malloc(n + 1));
  if (out != nullptr) {
    std::memcpy(out, text, n + 1);
  }
  return out;
}

// Runs `body`, turning any exception into an error string. c10::Error's what() carries the
// whole C++ backtrace; people need only the message.
template <typename F>
char* guarded(F&& body) {
  try {
    body();
    return nullptr;
  } catch (const c10::Error& e) {
    return dup_message(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return dup_message(e.what());
  } catch (...) {
    return dup_message("unknown C++ exception in gradless_ext");
  }
}

}  // namespace gradless

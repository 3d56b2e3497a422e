// The one source of libtessera_runtime.so (cmake/TesseraSharedRuntime.cmake): the library's
// content is the whole of the project's static archives; a shared library target needs a source.
namespace tessera {
// Lets a consumer check at run time which library it loaded (`nm -D`, dlsym).
extern "C" __attribute__((visibility("default"))) const char* tessera_runtime_library_version() {
  return TESSERA_VERSION;
}
}  // namespace tessera

// CTS expectations files (hal/cts/expectations.h: `tessera-cts --expectations FILE`), and the
// glob matcher their patterns go through for every test name.
#include "expectations.h"
#include "fuzz_target.h"

TESSERA_FUZZ_TARGET(cts_expectations) {
  const std::string_view text = tessera::fuzz::as_text(data, size);
  auto parsed = tessera::cts::Expectations::parse(text, "fuzz.txt");
  if (parsed.ok()) {
    for (const auto& entry : parsed->entries()) {
      FUZZ_CHECK(!entry.pattern.empty(), "an entry with an empty pattern");
      (void)tessera::cts::cite(entry);
    }
    (void)parsed->find("Memory.CopiesHostToDevice");
    (void)parsed->find("Stream.WaitsForAnEventRecordedOnAnotherStreamFromSeveralThreads");
  }
  // The first line as a pattern against the rest as a name: the matcher's worst cases.
  const size_t split = text.find('\n');
  if (split != std::string_view::npos) {
    (void)tessera::cts::glob_match(text.substr(0, split), text.substr(split + 1));
  }
  return 0;
}

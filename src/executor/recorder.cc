#include "recorder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "baton/deadline.h"
#include "baton/error.h"
#include "baton/files.h"
#include "baton/timing.h"

namespace baton {

std::size_t FlightRecord::Start(std::int64_t step, const Action& action) {
  const std::size_t entry = next_++ % kSize;
  ring_[entry] = {step, action, MonotonicSeconds(), -1};
  return entry;
}

void FlightRecord::Done(std::size_t entry) { ring_[entry].end = MonotonicSeconds(); }

void FlightRecord::Write(const std::string& path, int rank, std::int64_t step,
                         const std::vector<std::string>& injected) const {
  std::string out = fmt::format("{{\"rank\": {}, \"step\": {}, \"now\": {:.6f}, \"injected\": [", rank, step,
                                MonotonicSeconds());
  for (std::size_t i = 0; i < injected.size(); ++i) out += fmt::format("{}\"{}\"", i ? ", " : "", injected[i]);
  out += "], \"actions\": [";
  const std::size_t n = std::min(next_, kSize);
  for (std::size_t k = 0; k < n; ++k) {
    const Flight& f = ring_[(next_ - n + k) % kSize];
    out += fmt::format("{}\n  {{\"step\": {}, \"action\": \"{}\", \"start\": {:.6f}, \"end\": {}, \"state\": \"{}\"}}",
                       k ? "," : "", f.step, ToString(f.action), f.start,
                       f.end < 0 ? std::string("null") : fmt::format("{:.6f}", f.end), f.end < 0 ? "running" : "done");
  }
  out += "\n]}\n";
  try {
    WriteTextFile(path, out);  // whole or not at all
  } catch (const OutputError& e) {
    std::fprintf(stderr, "baton: rank %d: no flight record: %s\n", rank, e.what());
    return;
  }
  std::fprintf(stderr, "baton: rank %d: flight record in %s\n", rank, path.c_str());
}

ActionClock::Stamp ActionClock::Mark() const {
  if (!events_) return slow_ != 1.0 || measuring_ ? Stamp{MonotonicSeconds(), ThreadCpuSeconds(), -1} : Stamp{};
  return {MonotonicSeconds(), ThreadCpuSeconds(), device_clock_ ? dev_.MarkClock() : -1};
}

void ActionClock::Record(ActionKind kind, int stage, int microbatch, Stamp start) {
  if (!events_ && slow_ == 1.0 && !measuring_) return;
  // On the CPU the thread's own CPU time: what the action cost this rank,
  // whatever else shares its core (a shared machine's neighbours, more
  // ranks than cores) took meanwhile.
  double cpu = ThreadCpuSeconds();
  if (slow_ != 1.0) {
    // Busy on this core, as a slower device would be: factor times the
    // action's own work, no sleep.
    const double until = start.cpu + slow_ * (cpu - start.cpu);
    while ((cpu = ThreadCpuSeconds()) < until) WhileWaiting::Run();  // a slow wire's due messages meanwhile
  }
  if (measuring_) busy_ += cpu - start.cpu;
  const double end = MonotonicSeconds();
  if (!events_) return;
  const int end_mark = device_clock_ ? dev_.MarkClock() : -1;
  events_->push_back(
      {kind, stage, microbatch, start.wall, end, cpu - start.cpu, start.mark, end_mark});
}

void ActionClock::RecordWait(ActionKind kind, int stage, int microbatch, double start) {
  if (events_) events_->push_back({kind, stage, microbatch, start, MonotonicSeconds()});
}

void ActionClock::StartDeviceClock(std::size_t marks) {
  if (!device_clock_) return;
  dev_.StartClock(marks);
  clock_seconds_.reserve(marks + 1);
}

double ActionClock::ApplyDeviceClock(std::size_t first, double step_start) {
  if (!device_clock_) return step_start;
  const int end = dev_.MarkClock();
  dev_.ReadClock(&clock_seconds_);
  for (std::size_t e = first; e < events_->size(); ++e) {
    ActionEvent& ev = (*events_)[e];
    if (ev.start_mark < 0) continue;
    ev.start = step_start + clock_seconds_[static_cast<std::size_t>(ev.start_mark)];
    ev.end = step_start + clock_seconds_[static_cast<std::size_t>(ev.end_mark)];
  }
  return step_start + clock_seconds_[static_cast<std::size_t>(end)];
}

}  // namespace baton

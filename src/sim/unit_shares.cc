#include "unit_shares.h"

namespace baton {

UnitShares ShapeUnits(const Schedule& s, const SimOptions& o, const std::vector<double>& slice_cost,
                      const std::vector<double>& slice_message) {
  const MicrobatchShares& mb = o.microbatches;
  const int S = s.stages, m = s.microbatches;
  auto slice = [&](int u) { return static_cast<std::size_t>(s.SliceOf(u)); };
  UnitShares out;
  if (!mb.unit_cost.empty() || !mb.unit_message.empty()) {
    // Each unit's own share (MicrobatchShares::unit_cost, unit_message).
    const bool per_stage = static_cast<int>(mb.unit_cost.size()) == m * S && S > 1;
    out.stride = per_stage ? static_cast<std::size_t>(m) : 0;
    out.cost.assign(per_stage ? static_cast<std::size_t>(S) * m : static_cast<std::size_t>(m), 0.0);
    out.message_time.assign(static_cast<std::size_t>(m), 0.0);
    for (int u = 0; u < m; ++u) {
      for (int st = 0; st < (per_stage ? S : 1); ++st) {
        out.cost[st * out.stride + u] = mb.unit_cost.empty()
                                            ? slice_cost[slice(u)]
                                            : mb.unit_cost[static_cast<std::size_t>(u) * (per_stage ? S : 1) + st];
      }
      // A unit that sends nothing (a slice past its sequence's end) takes no time on the wire.
      const double share = mb.unit_message.empty() ? slice_message[slice(u)] : mb.unit_message[u];
      out.message_time[u] = share > 0 ? o.messages.Time(share) : 0.0;
    }
    return out;
  }
  const bool per_stage = static_cast<int>(mb.cost.size()) == s.sequences() * S && S > 1;
  out.stride = per_stage ? static_cast<std::size_t>(m) : 0;
  out.cost.assign(per_stage ? static_cast<std::size_t>(S) * m : static_cast<std::size_t>(m), 0.0);
  out.message_time.assign(static_cast<std::size_t>(m), 0.0);
  for (int u = 0; u < m; ++u) {
    const std::size_t j = static_cast<std::size_t>(s.SequenceOf(u));
    for (int st = 0; st < (per_stage ? S : 1); ++st) {
      const double own = mb.cost.empty() ? 1.0 : per_stage ? mb.cost[j * S + st] : mb.cost[j];
      out.cost[st * out.stride + u] = slice_cost[slice(u)] * own;
    }
    const double message = mb.message.empty() ? 1.0 : mb.message[j];
    out.message_time[u] = o.messages.Time(slice_message[slice(u)] * message);
  }
  return out;
}

}  // namespace baton

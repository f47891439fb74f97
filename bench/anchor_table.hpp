// The anchors measured once outside mxlinear and kept in a CSV file (bench/anchors/*.csv): the
// tri_mx time (Triton tl.dot_scaled, which the bench cannot run itself) of each (n, k, m). Any
// bytes give either the table or an mxlinear::Error naming the source, the line and what was
// expected.
#pragma once

#include <cstdint>
#include <istream>
#include <map>
#include <string>
#include <tuple>

namespace mxlinear::bench {

using AnchorKey = std::tuple<std::int64_t, std::int64_t, std::int64_t>;  // n, k, m

// Lines: "layer,n,k,m,bf16_us,fp8_tensor_us,fp8_block_us,tri_mx_us"; blank lines, '#' comments
// and the header are skipped. n, k and m are positive integers, tri_mx_us a positive finite
// number of microseconds; each (n, k, m) appears once.
std::map<AnchorKey, double> parse_tri_mx(std::istream& in, const std::string& source);

// The table of the file at `path`; an empty path gives an empty table.
std::map<AnchorKey, double> load_tri_mx(const std::string& path);

}  // namespace mxlinear::bench

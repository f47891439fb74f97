// Model CSVs: a file of layers parses; anything else (no layers, a bad row, a path that is no
// regular file, a file over the cap, binary bytes) is an Error naming the path and what was
// expected, and what the message echoes is escaped and short.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <random>

#include "cpu/scratch_dir.hpp"
#include "mxlinear/error.hpp"
#include "mxlinear/models.hpp"
#include "support/random.hpp"

namespace mxlinear::test {
namespace {

using ::testing::HasSubstr;

// The message of the Error that `f` throws ("" and a test failure if it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "no Error thrown";
  return "";
}

bool printable(const std::string& s) {
  for (const char c : s) {
    if (c < 0x20 || c >= 0x7F) return false;
  }
  return true;
}

TEST(ModelCsv, RowsWithHeaderCommentsBlankLinesAndCrlfParse) {
  const ScratchDir dir;
  const auto layers = load_model_csv(dir.file(
      "m.csv", "# model\r\nname,N,K,count\r\n\r\nqkv, 2560 ,6144,60\r\ndown,6144,768,57\n"));
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0].name, "qkv");
  EXPECT_EQ(layers[0].n, 2560);
  EXPECT_EQ(layers[0].k, 6144);
  EXPECT_EQ(layers[0].count, 60);
  EXPECT_EQ(layers[1].k, 768);
}

// Only a header names its columns: a layer called "name" is a layer. Tabs pad like spaces.
TEST(ModelCsv, ALayerCalledNameIsKeptAndTabsPadFields) {
  const auto layers = parse_model_csv("name,n,k,count\nname,4096,4096,1\nb,\t4096\t,64,2\n", "m");
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0].name, "name");
  EXPECT_EQ(layers[0].n, 4096);
  EXPECT_EQ(layers[1].n, 4096);
  EXPECT_EQ(layers[1].count, 2);
}

TEST(ModelCsv, FileWithoutASingleLayerIsAnErrorNamingIt) {
  const ScratchDir dir;
  for (const char* text : {"", "\n\n", "# only a comment\nname,N,K,count\n"}) {
    const std::string path = dir.file("empty.csv", text);
    EXPECT_THAT(error_of([&] { load_model_csv(path); }),
                HasSubstr("is '" + path +
                          "', which has no layers; expected a model CSV with at "
                          "least one 'name,N,K,count' row"))
        << '"' << text << '"';
  }
}

TEST(ModelCsv, PathThatIsNotARegularFileIsAnErrorNamingIt) {
  const ScratchDir dir;
  const std::string fifo = (dir.path / "fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::pair<std::string, std::string> cases[] = {
      {dir.path.string(), "a directory"},
      {"/dev/zero", "a character device"},
      {fifo, "a FIFO"},
  };
  for (const auto& [path, kind] : cases) {
    EXPECT_THAT(error_of([&] { load_model(path); }),
                HasSubstr("is '" + path + "', which is " + kind +
                          ", not a regular file; expected a model CSV file"));
  }
  EXPECT_THAT(error_of([&] { load_model_csv("/nonexistent/model.csv"); }),
              HasSubstr("which cannot be opened: No such file or directory"));
}

TEST(ModelCsv, FileOverTheSizeCapIsAnErrorNamingTheCap) {
  const ScratchDir dir;
  std::string text = "qkv,2560,6144,60\n";
  text += std::string(kMaxModelFileBytes + 1 - text.size(), '#');
  const std::string path = dir.file("big.csv", text);
  EXPECT_THAT(error_of([&] { load_model_csv(path); }),
              HasSubstr("is larger than the cap of 16777216 bytes (16 MiB): reading stopped after "
                        "16777217 bytes"));
}

TEST(ModelCsv, BadRowIsAnErrorNamingFileAndLine) {
  EXPECT_THAT(error_of([] { parse_model_csv("qkv,2560,6144,60\nx,2560,6100,1\n", "m.csv"); }),
              HasSubstr("has m.csv:2: 'x,2560,6100,1'; expected 'name,N,K,count'"));
  EXPECT_THAT(error_of([] { parse_model_csv("a,1,32,1,extra\n", "m.csv"); }), HasSubstr("m.csv:1"));
  EXPECT_THAT(error_of([] { parse_model_csv("a,1,32,0\n", "m.csv"); }), HasSubstr("m.csv:1"));
  EXPECT_THAT(error_of([] { parse_model_csv("a,33554432,4096,1\n", "m.csv"); }),
              HasSubstr("with N in 1..16777216, K a multiple of 32 in 32..16777216 and count in "
                        "1..1048576"));
}

// A binary file, or a path with terminal control bytes, is echoed escaped and cut short.
TEST(ModelCsv, MessagesEscapeAndBoundWhatTheyEcho) {
  auto rng = make_rng();
  std::uniform_int_distribution<int> byte(0, 255);
  std::string binary(100000, '\0');
  for (char& c : binary) c = static_cast<char>(byte(rng));
  std::replace(binary.begin(), binary.end(), '\n', '\0');  // one line of 100 KB
  if (binary[0] == '#') binary[0] = '\x1b';  // a leading '#' would make the line a comment
  const std::string message = error_of([&] { parse_model_csv(binary, "bin\x1b[2J.csv"); });
  EXPECT_THAT(message, HasSubstr("bin\\x1b[2J.csv:"));
  EXPECT_THAT(message, HasSubstr("more bytes not shown"));
  EXPECT_LT(message.size(), 600u);
  EXPECT_TRUE(printable(message)) << message;
  const std::string name = error_of([] { builtin_model(std::string(100000, 'x')); });
  EXPECT_THAT(name, HasSubstr("(99800 more bytes not shown)"));
  EXPECT_LT(name.size(), 500u);
}

// Random bytes, every truncation of a good file: a parse or an Error, nothing else.
TEST(ModelCsv, AnyBytesParseOrThrowError) {
  auto rng = make_rng();
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> length(0, 300);
  const std::string good = "# m\nname,N,K,count\nqkv,2560,6144,60\ndown,6144,768,57\n";
  for (std::size_t cut = 0; cut <= good.size(); ++cut) {
    try {
      for (const ModelLayer& l : parse_model_csv(good.substr(0, cut), "cut.csv")) {
        EXPECT_TRUE(l.n >= 1 && l.k >= 32 && l.k % 32 == 0 && l.count >= 1);
      }
    } catch (const Error& e) {
      EXPECT_TRUE(printable(e.what()));
    }
  }
  for (int i = 0; i < 2000; ++i) {
    std::string junk(static_cast<std::size_t>(length(rng)), '\0');
    for (char& c : junk) c = static_cast<char>(byte(rng) % 4 == 0 ? ',' : byte(rng));
    try {
      EXPECT_FALSE(parse_model_csv(junk, "junk.csv").empty());
    } catch (const Error& e) {
      EXPECT_TRUE(printable(e.what()));
      EXPECT_LT(std::string(e.what()).size(), 600u);
    }
  }
}

}  // namespace
}  // namespace mxlinear::test

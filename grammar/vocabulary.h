// The model's tokens as the engine sees them: the bytes each id decodes to
// on its own, which ids end the output, and which may never appear inside
// constrained output. Built once per tokenizer and shared by every compiled
// grammar of that model (its token trie is built here, once).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve::grammar {

class Vocabulary {
 public:
  // token_bytes: [V] the bytes of each id decoded alone ("" for an id with no
  // token). stop_ids: the ids that end the output (EOS, <|im_end|>,
  // <|eot_id|>, ...): allowed exactly when the grammar is complete.
  // special: [V] ids never allowed inside constrained output (other special
  // and control tokens). INVALID_ARGUMENT for sizes that disagree or a stop
  // id out of range.
  static absl::StatusOr<std::shared_ptr<const Vocabulary>> Create(std::vector<std::string> token_bytes,
                                                                  std::vector<int32_t> stop_ids,
                                                                  std::vector<bool> special);
  virtual ~Vocabulary() = default;

  virtual int32_t size() const = 0;
  virtual const std::string& bytes(int32_t id) const = 0;
  virtual const std::vector<int32_t>& stop_ids() const = 0;
  virtual bool special(int32_t id) const = 0;
};

}  // namespace tpserve::grammar

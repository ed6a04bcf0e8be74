# frozen_string_literal: true

module Ratekeeper
  # The gem's version (that of the library it carries).
  VERSION = "0.1.0"
end
